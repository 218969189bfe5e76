"""How far a report's pasted environment moves `ask`: each train query alone, then with real
environment output appended, as bug reports paste it (issue templates ask for it first).

    python bench/bench_ask_pastes.py            # ranked top-1 of the train queries, per paste (~4 CPU min)

The pastes are the real outputs kept as test fixtures (tests/fixtures/reports/): `python -m
torch.utils.collect_env` run here, and the system-info block of a real accelerate issue (#3512:
`accelerate env` with its default config, and the template's checkboxes). Each query is ranked by
its cross-validation fold's index (bench/crossval.py), as bench_eval ranks train. Test is not read.
A paste should cost little: its words describe the machine, not the failure
(triage/core/boilerplate.py drops them). 2026-11-24, 1469 train queries: alone 74.7 %; + collect_env
74.7 % (64.4 % before the filter, with a GPU machine's dump); + accelerate block 74.7 % (52.4 %).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import REPO, load, names_right
from crossval import fold_kbs, fold_of

REPORTS = REPO / "tests" / "fixtures" / "reports"


def main() -> int:
    from triage.core.matcher import rank
    from triage.kb.loader import load_kb

    kb = load_kb()
    train = [i for i in load("queries") if i.split == "train"]
    kbs = fold_kbs(kb, train)
    pastes = {
        "alone": "",
        "+ collect_env": "\n\n" + (REPORTS / "collect_env_cpu.txt").read_text(encoding="utf-8"),
        "+ accelerate issue block": "\n\n"
        + (REPORTS / "accelerate_issue_3512.txt").read_text(encoding="utf-8").split("\n", 1)[1],
    }
    queries = [i for i in train if not i.is_log]
    for name, paste in pastes.items():
        right = sum(
            names_right(kb, item, rank(kbs[fold_of(item)], item.text + paste, top=1).hits[0].entry.id)
            for item in queries
        )
        print(
            f"{name:28} ranked top-1 {100 * right / len(queries):5.1f} %  ({right}/{len(queries)} train queries)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
