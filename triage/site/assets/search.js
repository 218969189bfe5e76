/* Client-side search for the triage docs site. It ranks entries exactly as `triage ask` does
   (triage/matcher.py and triage/text.py): the same normalisation of the query, BM25 over the
   entries' precomputed term weights, fuzzy similarity to the symptom phrasings, signature
   regexes, the same weights and calibration. The data (search-index.js) is loaded on first use. */
(function () {
  "use strict";
  var LIMIT = 8, FLOOR = 0.2, model = null;

  function escapeRe(s) { return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"); }

  function prepare(data) {
    var stop = new Set(data.stopwords), vocab = data.vocabulary, variants = Object.keys(vocab);
    variants.sort(function (a, b) { return b.length - a.length; });
    // Variants are matched as token sequences, longest first (triage/text.py Normalizer).
    var TOKEN_RE = /[a-z0-9]+(?:_[a-z0-9]+)*/g, ngram = new Map(), longest = 0;
    Object.keys(vocab).forEach(function (v) {
      var key = v.toLowerCase().match(TOKEN_RE) || [];
      if (key.length) { ngram.set(key.join(" "), vocab[v].toLowerCase()); longest = Math.max(longest, key.length); }
    });
    function canonical(raw) {
      var out = [], i = 0;
      while (i < raw.length) {
        var n = Math.min(longest, raw.length - i), hit = false;
        for (; n > 0; n--) {
          var c = ngram.get(raw.slice(i, i + n).join(" "));
          if (c !== undefined) { out.push(c); i += n; hit = true; break; }
        }
        if (!hit) { out.push(raw[i]); i += 1; }
      }
      return out;
    }
    function stem(t) {
      if (t.length <= 3 || !/^[a-z]+$/.test(t)) return t;
      if (t.endsWith("ies") && t.length > 4) t = t.slice(0, -3) + "y";
      else if (/(sses|ches|shes|xes|zes)$/.test(t)) t = t.slice(0, -2);
      else if (t.endsWith("s") && !/(ss|us|is)$/.test(t)) t = t.slice(0, -1);
      if (t.endsWith("ing") && t.length >= 7) t = t.slice(0, -3);
      else if (t.endsWith("ed") && t.length >= 6) t = t.slice(0, -2);
      if (t.endsWith("e") && t.length > 4) t = t.slice(0, -1);
      return t;
    }
    function tokens(text) {
      var out = [];
      canonical(text.toLowerCase().match(TOKEN_RE) || []).forEach(function (raw) {
        if (stop.has(raw)) return;
        out.push(stem(raw));
        if (raw.indexOf("_") >= 0) raw.split("_").forEach(function (p) { if (p && !stop.has(p)) out.push(stem(p)); });
      });
      return out;
    }
    var idf = new Map(data.terms.map(function (t, i) { return [t, data.idf[i]]; }));
    var entries = data.entries.map(function (e) {
      var sigs = [];
      e.signatures.forEach(function (s) {
        try { sigs.push([new RegExp(s[0], "im"), s[1], s[2], s[3] ? [s[3]] : [], s[4]]); }
        catch (err) { /* Python-only syntax */ }
      });
      return { e: e, tf: new Map(e.tf.map(function (p) { return [data.terms[p[0]], p[1]]; })), sigs: sigs,
        sets: e.phrases.map(function (p) { return new Set(p[0].split(/\s+/).filter(Boolean)); }) };
    });
    var phraseRe = variants.length ? new RegExp("(?<![A-Za-z0-9_])(?:" + variants.map(escapeRe).join("|") + ")(?![A-Za-z0-9_])", "gi") : null;
    return { m: data.model, idf: idf, entries: entries, tokens: tokens, maxIdf: data.maxIdf, avg: data.avgLength,
      phraseRe: phraseRe };
  }

  // rapidfuzz's token_set_ratio (fuzz_py.py), on token sets, as a 0..1 similarity.
  function tokenSetRatio(a, b) {
    if (!a.size || !b.size) return 0;
    var inter = [], ab = [], ba = [];
    a.forEach(function (t) { (b.has(t) ? inter : ab).push(t); });
    b.forEach(function (t) { if (!a.has(t)) ba.push(t); });
    if (inter.length && (!ab.length || !ba.length)) return 1;
    var abJ = ab.sort().join(" "), baJ = ba.sort().join(" ");
    var sect = inter.length ? inter.join(" ").length : 0;
    var sectAb = sect + (sect ? 1 : 0) + abJ.length, sectBa = sect + (sect ? 1 : 0) + baJ.length;
    var lensum = sectAb + sectBa, dist = abJ.length + baJ.length - 2 * lcs(abJ, baJ);
    var result = lensum ? 1 - dist / lensum : 1;
    if (!sect) return result;
    var r1 = 1 - ((sect ? 1 : 0) + abJ.length) / (sect + sectAb);
    var r2 = 1 - ((sect ? 1 : 0) + baJ.length) / (sect + sectBa);
    return Math.max(result, r1, r2);
  }
  // Longest common subsequence length (Indel distance = len a + len b - 2 * LCS).
  function lcs(a, b) {
    if (!a.length || !b.length) return 0;
    var prev = new Array(b.length + 1).fill(0), cur = new Array(b.length + 1).fill(0);
    for (var i = 1; i <= a.length; i++) {
      for (var j = 1; j <= b.length; j++) {
        cur[j] = a[i - 1] === b[j - 1] ? prev[j - 1] + 1 : Math.max(prev[j], cur[j - 1]);
      }
      var swap = prev; prev = cur; cur = swap;
    }
    return prev[b.length];
  }

  // The parts of `text` a signature is searched in (triage/core/safe_regex.py windows): all of a
  // short text, else windows around the first places its literal occurs, so that no pasted text
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

  function rank(text) {
    var x = model, m = x.m, qt = x.tokens(text), unique = Array.from(new Set(qt)), lowered = text.toLowerCase();
    var ideal = unique.reduce(function (s, t) { return s + (x.idf.has(t) ? x.idf.get(t) : x.maxIdf) * (m.k1 + 1); }, 0);
    var query = new Set(unique.slice(0, m.maxFuzzyTokens));
    return x.entries.map(function (d) {
      var lex = 0, fuzzy = 0, best = -1, sig = 0, found = 0;
      if (qt.length) {
        var norm = m.k1 * (1 - m.b + m.b * d.e.length / x.avg), total = 0;
        unique.forEach(function (t) { var tf = d.tf.get(t); if (tf) total += x.idf.get(t) * tf * (m.k1 + 1) / (tf + norm); });
        lex = ideal ? total / ideal : 0;
        d.sets.forEach(function (p, i) { var r = tokenSetRatio(query, p); if (r > fuzzy) { fuzzy = r; best = i; } });
      }
      d.sigs.forEach(function (s) {
        if (s[3].length && lowered.indexOf(s[3][0]) < 0) return;
        if (!windows(text, lowered, s[3], s[4]).some(function (part) { return s[0].test(part); })) return;
        found += 1; sig = Math.max(sig, s[1] * (s[2] ? m.echoFactor : 1));
      });
      if (found > 1) sig = Math.min(1, sig + 0.1 * (found - 1));
      var raw = m.wSignature * sig + m.wLexical * lex + m.wFuzzy * fuzzy;
      var score = Math.round(1000 / (1 + Math.exp(-m.calSlope * (raw - m.calMidpoint)))) / 1000;
      return { e: d.e, score: score, phrase: best >= 0 ? d.e.phrases[best][1] : "" };
    }).sort(function (a, b) { return b.score - a.score || (a.e.id < b.e.id ? -1 : a.e.id > b.e.id ? 1 : 0); });
  }

  // Marks the words of `text` that meet the query: vocabulary phrases ("end of epoch") as a whole,
  // then single words.
  function marked(text, qs, into) {
    var pos = 0, re = model.phraseRe, m;
    function words(part) {
      part.split(/(\s+)/).forEach(function (word) {
        var hit = model.tokens(word).some(function (t) { return qs.has(t); });
        into.appendChild(hit ? mark(word) : document.createTextNode(word));
      });
    }
    function mark(part) { var el = document.createElement("mark"); el.textContent = part; return el; }
    if (re) {
      re.lastIndex = 0;
      while ((m = re.exec(text)) !== null) {
        if (!m[0].length) { re.lastIndex += 1; continue; }
        var hit = model.tokens(m[0]).some(function (t) { return qs.has(t); });
        if (!hit || m[0].indexOf(" ") < 0) continue;
        words(text.slice(pos, m.index));
        into.appendChild(mark(m[0]));
        pos = m.index + m[0].length;
      }
    }
    words(text.slice(pos));
  }

  function show(query, box) {
    var list = box.querySelector("ol"), status = box.querySelector("[role=status]");
    list.replaceChildren();
    if (!query.trim()) { box.hidden = true; status.textContent = ""; return; }
    var results = rank(query).filter(function (r) { return r.score >= FLOOR; }).slice(0, LIMIT);
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
    status.textContent = results.length
      ? (results.length === 1 ? "1 entry matches" : results.length + " entries match") + ", best first"
      : "Nothing matches well. Try other words, paste the error line, or follow the decision graph.";
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
