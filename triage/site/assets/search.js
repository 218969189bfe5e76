/* Client-side search for the triage docs site. It ranks entries exactly as `triage ask` does
   (triage/core/matcher.py and triage/core/text.py): the same normalising rules for the query, the
   same precomputed index (term weights, per-entry strengths, symptom phrasings, signatures), the
   same constants and confidence model. The data (search-index.js) is loaded on first use. */
(function () {
  "use strict";
  // Results shown: up to LIMIT entries with at least RELATIVE of the best entry's evidence.
  var LIMIT = 8, RELATIVE = 0.35, model = null;

  function len(s) { return Array.from(s).length; }
  function isAscii(s) { return /^[\x00-\x7f]*$/.test(s); }
  function isAlpha(s) { return /^\p{L}+$/u.test(s); }
  function hasCase(s) { return s.toLowerCase() !== s.toUpperCase(); }
  function isUpper(s) { return hasCase(s) && s === s.toUpperCase(); }
  function isLower(s) { return hasCase(s) && s === s.toLowerCase(); }

  // triage/core/text.py, step by step.
  var TRIM = "\"'`()[]{}<>,;!?";
  var SOURCE_SUFFIX = /\.(?:py|pyx|pyi|cpp|cc|cxx|cu|cuh|hpp|h|c|so)(?::\d+)*$/;
  var IDENTIFIER = /[\p{L}\p{N}]+(?:[_-]+[\p{L}\p{N}]+)*/gu;
  var HUMP = /(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])/g;
  var ACRONYMS = /^(?:[A-Z]{2,}s|[KMGTP]iB)$/;
  var HEX = /^(?:0x[0-9a-f]+|[0-9a-f]{7,})$/;
  var FRAME = /File "[^"\n]*", line \d+,?/g;
  var CJK_CLASS = "\\u4e00-\\u9fff\\u3040-\\u30ff\\uac00-\\ud7af\\u3400-\\u4dbf\\uf900-\\ufaff";
  var CJK = new RegExp("[" + CJK_CLASS + "]"), CJK_RUNS = new RegExp("[" + CJK_CLASS + "]+|[^" + CJK_CLASS + "]+", "g");

  function strip(s) {
    var a = 0, b = s.length;
    while (a < b && TRIM.indexOf(s[a]) >= 0) a++;
    while (b > a && TRIM.indexOf(s[b - 1]) >= 0) b--;
    return s.slice(a, b);
  }
  function chunks(text) {
    return text.replace(FRAME, " ").split(/\s+/).filter(Boolean).map(strip).filter(function (c) {
      if (c.indexOf("://") >= 0 || c.startsWith("www.") || c.indexOf("-packages") >= 0) return false;
      var m = SOURCE_SUFFIX.exec(c);
      return !(m && m.index > 0);
    });
  }
  function fold(w) { return isAscii(w) ? w : w.normalize("NFKD").replace(/\p{M}/gu, ""); }
  function isNumber(w) {
    if (/^\p{Nd}+$/u.test(w) || HEX.test(w)) return true;
    var digits = (w.match(/\p{Nd}/gu) || []).length;
    return digits * 2 > len(w);
  }
  function rawWords(text) {
    var out = [];
    chunks(text).forEach(function (chunk) {
      (chunk.match(IDENTIFIER) || []).forEach(function (ident) {
        var words = [];
        ident.split(/[_-]+/).forEach(function (piece) {
          if (!piece) return;
          var parts = isUpper(piece) || isLower(piece) || !isAscii(piece) || ACRONYMS.test(piece)
            ? [piece] : piece.replace(HUMP, " ").split(/\s+/).filter(Boolean);
          if (parts.some(function (h) { return /^[A-Z][a-z]$/.test(h); })) parts = [piece];
          parts.forEach(function (p) { words.push(fold(p.toLowerCase())); });
        });
        words.forEach(function (w) { out.push(w); });
        if (words.length > 1) out.push(words.join(""));
      });
    });
    return out;
  }
  function stemmer(plurals) {
    return function stem(w) {
      if (len(w) <= 3 || !isAlpha(w) || !isAscii(w)) return w;
      if (w.endsWith("sses")) w = w.slice(0, -2);
      else if (w.endsWith("ies") && w.length > 4) w = w.slice(0, -3) + "y";
      else if (/(?:ches|shes|xes|zes)$/.test(w)) w = w.slice(0, -2);
      else if (w.endsWith("s") && (!/(?:ss|us|is)$/.test(w) || plurals.has(w))) w = w.slice(0, -1);
      var rules = [["ing", 4], ["ed", 3]];
      for (var i = 0; i < rules.length; i++) {
        var suffix = rules[i][0], part = w.slice(0, -suffix.length);
        if (w.endsWith(suffix) && part.length >= rules[i][1] && /[aeiouy]/.test(part)) {
          w = part;
          if (w.length > 3 && w[w.length - 1] === w[w.length - 2] && "lsz".indexOf(w[w.length - 1]) < 0) w = w.slice(0, -1);
          break;
        }
      }
      if (w.endsWith("isation") || w.endsWith("ization")) w = w.slice(0, -5);
      else if (w.endsWith("ly") && w.length > 5) w = w.slice(0, -2);
      if (w.endsWith("e") && w.length > 4) w = w.slice(0, -1);
      if (w.endsWith("is") && w.length > 6) w = w.slice(0, -1) + "z";
      return w;
    };
  }

  function prepare(data) {
    var m = data.model, stop = new Set(data.stopwords), units = new Set(data.units);
    var suffixes = new Set(data.numberSuffixes);
    function withUnit(w) { var g = /^(\p{Nd}+)([a-z]+)$/u.exec(w); return g !== null && suffixes.has(g[2]); }
    var stem = stemmer(new Set(data.pluralAcronyms));
    var variants = data.variants;
    function term(w) {
      if (stop.has(w) || len(w) < 2 || units.has(w) || isNumber(w) || withUnit(w)) return [w, false];
      return [stem(w), true];
    }
    // text.py's _cjk_terms: runs in those scripts as overlapping character pairs (no terms of their own)
    function sequence(text) {
      var out = [];
      rawWords(text).forEach(function (w) {
        if (isAscii(w) || !CJK.test(w)) { out.push(term(w)); return; }
        (w.match(CJK_RUNS) || []).forEach(function (run) {
          var chars = Array.from(run);
          if (!CJK.test(chars[0])) out.push(term(run));
          else if (chars.length === 1) out.push([run, false]);
          else for (var i = 0; i + 1 < chars.length; i++) out.push([chars[i] + chars[i + 1], false]);
        });
      });
      return out;
    }
    function overlaps(pair, next) {
      var a = Array.from(pair), b = Array.from(next);
      return a.length === 2 && b.length === 2 && a[1] === b[0] && CJK.test(a[1]);
    }
    function matchAt(seq, start, key, content) {
      var positions = [start], gaps = 0, at = start + 1;
      for (var k = 1; k < key.length; k++) {
        while (content[k] && at < seq.length && seq[at][0] !== key[k] && gaps < m.windowGap) { at++; gaps++; }
        if (at >= seq.length || seq[at][0] !== key[k]) return null;
        positions.push(at); at++;
      }
      return positions;
    }
    function tokens(text) {
      var seq = sequence(text), out = [], i = 0;
      while (i < seq.length) {
        var options = Object.prototype.hasOwnProperty.call(variants, seq[i][0]) ? variants[seq[i][0]] : [], hit = false;
        for (var o = 0; o < options.length; o++) {
          var key = options[o][0], positions = key.length > 1 ? matchAt(seq, i, key, options[o][1]) : [i];
          if (!positions) continue;
          out.push(options[o][2]);
          for (var j = i; j <= positions[positions.length - 1]; j++) {
            if (seq[j][1] && positions.indexOf(j) < 0) out.push(seq[j][0]);
          }
          i = positions[positions.length - 1] + 1; hit = true;
          if (i < seq.length && overlaps(seq[i - 1][0], seq[i][0])) i++;
          break;
        }
        if (!hit) { if (seq[i][1]) out.push(seq[i][0]); i++; }
      }
      return out;
    }
    var decoded = new Map(), shapes = null;
    function posting(term) {
      if (!decoded.has(term)) {
        var raw = Object.prototype.hasOwnProperty.call(data.postings, term) ? data.postings[term] : null, value = null;
        if (raw !== null) {
          // "weight;entry:strength ...|entry.phrasing ..." (triage/core/match_index.py compact_index)
          var cut = raw.indexOf(";"), bar = raw.indexOf("|"), places = raw.slice(bar + 1);
          value = [parseFloat(raw.slice(0, cut)), raw.slice(cut + 1, bar).split(" ").map(function (item) {
            var p = item.split(":"); return [parseInt(p[0], 10), parseFloat(p[1])];
          }), places ? places.split(" ").map(function (item) {
            var p = item.split("."); return [parseInt(p[0], 10), parseInt(p[1], 10)];
          }) : []];
        }
        decoded.set(term, value);
      }
      return decoded.get(term);
    }
    function editDistance(a, b, limit) {
      var prev2 = [], prev = [];
      for (var j = 0; j <= b.length; j++) prev.push(j);
      for (var i = 1; i <= a.length; i++) {
        var cur = [i];
        for (j = 1; j <= b.length; j++) {
          var cost = a[i - 1] === b[j - 1] ? 0 : 1;
          cur[j] = Math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost);
          if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) cur[j] = Math.min(cur[j], prev2[j - 2] + 1);
        }
        if (Math.min.apply(null, cur) > limit) return limit + 1;
        prev2 = prev; prev = cur;
      }
      return prev[b.length];
    }
    function correct(term) {
      if (term.length < 5 || !isAlpha(term) || !isAscii(term)) return null;
      if (!shapes) {
        shapes = new Map();
        Object.keys(data.postings).forEach(function (k) {
          if (k.length >= 4 && isAlpha(k)) {
            var key = k[0] + ":" + k.length;
            if (!shapes.has(key)) shapes.set(key, []);
            shapes.get(key).push(k);
          }
        });
      }
      var limit = term.length < 8 ? 1 : 2, best = null;
      for (var size = term.length - limit; size <= term.length + limit; size++) {
        (shapes.get(term[0] + ":" + size) || []).forEach(function (k) {
          var d = editDistance(term, k, limit);
          if (d <= limit && (best === null || d < best[0] || (d === best[0] && k < best[1]))) best = [d, k];
        });
      }
      return best ? best[1] : null;
    }
    var entries = data.entries.map(function (e, position) {
      var sigs = data.signatures[position].map(function (s) {
        var re = null;
        try { re = new RegExp(s[4], "im"); } catch (err) { /* Python-only syntax */ }
        return { re: re, weight: s[1], echo: s[2], anchors: s[3], reach: s[5] };
      });
      return { e: e, sigs: sigs, phrases: e.phrases.map(function (p) { return [p[0], p[1].split(" "), p[2]]; }) };
    });
    var domain = m.domain ? new RegExp(m.domain) : null;
    return { m: m, tokens: tokens, posting: posting, correct: correct, entries: entries, domain: domain };
  }

  function pairs(tokens) {
    var out = tokens.slice();
    for (var i = 0; i + 1 < tokens.length; i++) if (tokens[i] !== tokens[i + 1]) out.push(tokens[i] + "+" + tokens[i + 1]);
    return out;
  }

  function queryTerms(x, text) {
    var m = x.m, tokens = x.tokens(text), all = pairs(tokens), first = new Map(), terms = new Map();
    all.forEach(function (t, position) { if (!first.has(t)) first.set(t, position < tokens.length ? position : position - tokens.length); });
    var unknown = 0;
    first.forEach(function (at, term) {
      var lead = at < m.leadTerms ? 1 : Math.pow(m.leadTerms / (at + 1), m.leadDecay);
      var p = x.posting(term);
      if (p) { terms.set(term, Math.max(terms.has(term) ? terms.get(term) : 0, p[0] * lead)); return; }
      var fixed = term.indexOf("+") < 0 ? x.correct(term) : null, fp = fixed ? x.posting(fixed) : null;
      if (fixed && fp) terms.set(fixed, Math.max(terms.has(fixed) ? terms.get(fixed) : 0, fp[0] * m.typoDiscount * lead));
      else if (term.indexOf("+") < 0) unknown++;
    });
    return [terms, unknown];
  }

  // The parts of `text` a signature is searched in (triage/core/safe_regex.py windows): all of a
  // short text, else windows around the first places its anchors occur, so that no pasted text
  // can make a regex run for long (the patterns' repeats are bounded too).
  function windows(text, lowered, anchors, span) {
    var m = model.m;
    if (text.length <= m.matchChars) return [text];
    if (!anchors.length) return [text.slice(0, m.matchChars)];
    var starts = [], longest = 0;
    anchors.forEach(function (a) {
      longest = Math.max(longest, a.length);
      var p = lowered.indexOf(a);
      while (p !== -1 && starts.length < m.maxWindows * anchors.length) {
        starts.push(p);
        p = lowered.indexOf(a, p + Math.max(1, span));
      }
    });
    starts.sort(function (a, b) { return a - b; });
    var out = [], covered = -1;
    starts.slice(0, m.maxWindows).forEach(function (p) {
      var low = Math.max(covered, p - span, 0), high = p + span + longest;
      if (high > low) out.push(text.slice(low, high));
      covered = high;
    });
    return out;
  }

  function probability(c, score, lead, signature, known, unknown, domain) {
    var z = c.bias + c.score * score + c.lead * lead + c.signature * signature + c.known * Math.log1p(known);
    z += c.unknown * unknown / Math.max(known + unknown, 1) + c.domain * (domain ? 1 : 0);
    return 1 / (1 + Math.exp(-Math.max(-40, Math.min(40, z))));
  }

  function rank(text) {
    var x = model, m = x.m, size = x.entries.length;
    text = text.slice(0, m.maxChars);
    var found = queryTerms(x, text), terms = found[0], unknown = found[1];
    var ordered = Array.from(terms.keys()).sort();
    var known = ordered.filter(function (t) { return t.indexOf("+") < 0; }).length;
    var explained = new Array(size).fill(0), total = 0, common = new Map();
    ordered.forEach(function (t) {
      var w = terms.get(t), p = x.posting(t);
      p[1].forEach(function (e) { explained[e[0]] += w * e[1]; });
      p[2].forEach(function (place) {
        var key = place[0] + "." + place[1];
        common.set(key, (common.has(key) ? common.get(key) : 0) + w);
      });
    });
    ordered.forEach(function (t) { total += terms.get(t); });
    var phrases = new Array(size).fill(0), bests = new Array(size).fill(-1);
    common.forEach(function (w, key) {
      var place = key.split("."), position = +place[0], number = +place[1];
      var r = 2 * w / (total + x.entries[position].phrases[number][0]);
      if (r > phrases[position]) { phrases[position] = r; bests[position] = number; }
    });
    var lowered = text.toLowerCase();
    var scored = x.entries.map(function (d, position) {
      var phrase = phrases[position], best = bests[position];
      var sig = 0, found = 0;
      d.sigs.forEach(function (s) {
        if (s.anchors.length && !s.anchors.some(function (a) { return lowered.indexOf(a) >= 0; })) return;
        if (!s.re || !windows(text, lowered, s.anchors, s.reach).some(function (part) { return s.re.test(part); })) return;
        found += 1; sig = Math.max(sig, s.weight * (s.echo ? m.echoFactor : 1));
      });
      if (found > 1) sig = Math.min(1, sig + 0.1 * (found - 1));
      var coverage = explained[position] / (total + m.prior);
      var raw = m.wCoverage * coverage + m.wPhrase * phrase + m.wSignature * sig;
      return { e: d.e, raw: raw, signature: sig, phrase: best >= 0 ? d.phrases[best][2] : "" };
    }).sort(function (a, b) { return b.raw - a.raw || (a.e.id < b.e.id ? -1 : a.e.id > b.e.id ? 1 : 0); });
    // Each entry's lead in words over every other entry (negative when a signature put it first).
    var c = m.confidence, byWords = scored.map(function (r) { return r.raw - m.wSignature * r.signature; });
    byWords.sort(function (a, b) { return b - a; });
    byWords.push(0, 0);
    var top = scored.length ? scored[0].raw : 0;
    var inDomain = x.domain !== null && x.domain.test(lowered);
    scored.forEach(function (r, i) {
      var words = r.raw - m.wSignature * r.signature, lead = words - (words >= byWords[0] ? byWords[1] : byWords[0]);
      if (i > 0) lead = Math.min(lead, r.raw - top);  // ranked below the best: behind it, whatever its words say
      r.probability = probability(c, words, lead, r.signature, known, unknown, inDomain);
      r.score = Math.round(1000 * r.probability) / 1000;
    });
    return scored;
  }

  // Marks the words of `text` that meet the query: a run of up to four words as a whole where
  // together they make a term none of them makes alone ("end of epoch"), else single words.
  function marked(text, qs, into) {
    var parts = text.split(/(\s+)/), i = 0;
    function hits(piece) { return model.tokens(piece).filter(function (t) { return qs.has(t); }); }
    function mark(part) { var el = document.createElement("mark"); el.textContent = part; return el; }
    while (i < parts.length) {
      var done = false;
      for (var n = 7; n >= 3 && !done; n -= 2) {
        if (i + n > parts.length || /^\s*$/.test(parts[i])) continue;
        var span = parts.slice(i, i + n), alone = new Set();
        span.forEach(function (w) { hits(w).forEach(function (t) { alone.add(t); }); });
        if (hits(span.join("")).some(function (t) { return !alone.has(t); })) {
          into.appendChild(mark(span.join(""))); i += n; done = true;
        }
      }
      if (done) continue;
      into.appendChild(hits(parts[i]).length ? mark(parts[i]) : document.createTextNode(parts[i]));
      i += 1;
    }
  }

  function show(query, box) {
    var list = box.querySelector("ol"), status = box.querySelector("[role=status]");
    list.replaceChildren();
    if (!query.trim()) { box.hidden = true; status.textContent = ""; return; }
    var ranked = rank(query), best = ranked.length ? ranked[0] : null;
    // below the floor the best entry is a guess ("it does not work" shares a word with every entry)
    var guess = !best || best.raw <= 0 || best.probability < model.m.evidenceFloor;
    var results = guess ? [] : ranked.filter(function (r) { return r.raw > 0 && r.raw >= RELATIVE * best.raw; }).slice(0, LIMIT);
    var sure = best && best.probability >= model.m.confidence.threshold;
    var qs = new Set(model.tokens(query));
    results.forEach(function (r) {
      var li = document.createElement("li"), a = document.createElement("a"), id = document.createElement("span");
      a.href = r.e.url;
      id.className = "id"; id.textContent = r.e.id;
      a.append(id, " " + r.e.title);
      li.appendChild(a);
      if (r.e.verify || r.e.outside) {
        var b = document.createElement("span");
        b.className = r.e.verify ? "badge verify" : "badge outside";
        b.textContent = r.e.verify ? "needs experiment verification" : "not covered by triage";
        li.append(" ", b);
      }
      var p = document.createElement("p");
      p.className = "snippet";
      marked(r.phrase && r.phrase !== r.e.title ? r.phrase : r.e.summary, qs, p);
      li.appendChild(p);
      list.appendChild(li);
    });
    status.textContent = !results.length
      ? "Nothing matches well. Try other words, paste the error line, or follow the decision graph."
      : sure ? (results.length === 1 ? "1 entry matches" : results.length + " entries match") + ", best first"
        : "Nothing matches well; the closest entries, for what they are worth:";
    box.hidden = false;
  }

  function load(then) {
    if (model) return then();
    if (window.TRIAGE_SEARCH) { model = prepare(window.TRIAGE_SEARCH); return then(); }
    var s = document.querySelector("script[data-search-index]");
    if (!s) {
      s = document.createElement("script");
      s.src = "search-index.js";
      s.dataset.searchIndex = "";
      document.head.appendChild(s);
    }
    s.addEventListener("load", function () { model = model || prepare(window.TRIAGE_SEARCH); then(); });
  }

  window.triageSearch = { rank: function (q) { return rank(q); }, tokens: function (q) { return model.tokens(q); }, load: load };

  document.addEventListener("DOMContentLoaded", function () {
    var input = document.getElementById("search-input"), box = document.getElementById("search-results");
    var form = document.getElementById("search");
    if (!input || !box || !form) return;
    function run() { load(function () { show(input.value, box); }); }
    input.addEventListener("focus", function () { load(function () {}); });
    input.addEventListener("input", run);
    input.addEventListener("keydown", function (ev) {
      if (ev.key === "Escape") { input.value = ""; show("", box); }
      if (ev.key === "ArrowDown") { var a = box.querySelector("a"); if (a) { ev.preventDefault(); a.focus(); } }
    });
    form.addEventListener("submit", function (ev) {
      var first = box.querySelector("a");
      if (first) { ev.preventDefault(); window.location.href = first.href; }
    });
    var q = new URLSearchParams(window.location.search).get("q");
    if (q) { input.value = q; run(); }
  });
})();
