"""bench/class_bound.py, ranking by class with perfect statistics, replays what
`kvtier replay --compare` replays: its LRU must hit what the replay's LRU hits, and on a stream
whose classes tell reuse apart it must keep what is used again and nothing else.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, kvtier_cli_path

sys.path.insert(0, str(ROOT / "bench"))
import class_bound


def test_its_lru_hits_what_the_replay_s_lru_hits(tmp_path: Path) -> None:
    trace = tmp_path / "chat.jsonl"
    subprocess.run(
        [
            kvtier_cli_path(),
            "trace",
            "gen",
            "--workload",
            "chat",
            "--seed",
            "5",
            "--sessions",
            "120",
            "--tenants",
            "2",
            "--block-tokens",
            "256",
            "--out",
            str(trace),
        ],
        check=True,
        capture_output=True,
    )
    out = subprocess.run(
        [kvtier_cli_path(), "replay", str(trace), "--compare"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    table = out.split("block hit ratio, by G2 capacity:\n")[1].split("\n\n")[0].splitlines()
    lru_column = table[0].split().index("LRU") - 1
    requests = class_bound.load(str(trace), 512)
    compared = 0
    for row in table[1:]:
        capacity = int(row.split("(")[1].split()[0])
        cells = row.split(")")[1].split()
        assert f"{class_bound.lru(requests, capacity):.2f}%" == cells[lru_column], row
        compared += 1
    assert compared == 7


def test_each_reference_gets_the_class_of_what_its_request_did() -> None:
    prompt = [("default", i) for i in range(40)]
    requests = [
        (0.0, prompt),  # 40 new blocks: turn 0, its 16th on a tail.
        (0.5, prompt),  # The same again, 0.5 s later: no new turn.
        (10.0, prompt + [("default", 99)]),  # One block more: turn 1, 9.5 s after.
        (11.0, [("default", 0)]),  # Block 0 read alone...
        (12.0, [("default", 0), ("default", 50)]),  # ...and extended: a turn deeper...
        (13.0, [("default", 0), ("default", 51)]),  # ...but not again: it is a branch point.
    ]
    classes, used_again = class_bound.classify(
        requests, ["turn", "size", "tail", "gap", "seen", "last"]
    )
    assert classes[0] == classes[14] == (0, 6, False, 0, False, False)
    assert classes[15] == (0, 6, True, 0, False, False)
    assert classes[40] == (0, 0, False, 1, True, False)
    assert classes[120] == (1, 1, False, 5, False, True)
    assert classes[121:] == [
        (0, 0, False, 0, True, True),
        (1, 1, False, 2, True, False),
        (1, 1, False, 2, False, True),
        (0, 1, False, 0, True, False),
        (0, 1, False, 0, False, True),
    ]
    assert used_again == [True] * 81 + [False] * 40 + [True, True, False, False, False]


def test_classes_that_tell_reuse_apart_keep_only_what_is_used_again(tmp_path: Path) -> None:
    # A prompt of two blocks read every 10 s, and between its reads a scan of four blocks never
    # read again. Three blocks of room: LRU loses the prompt to every scan; ranking by class
    # (requests of other sizes, and the prompt's blocks seen before from its second read on)
    # keeps it, as storing only blocks with a later use does.
    lines = []
    for i in range(40):
        lines.append(
            {"timestamp": 10_000 * i, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}
        )
        lines.append(
            {
                "timestamp": 10_000 * i + 5_000,
                "input_length": 2048,
                "output_length": 1,
                "hash_ids": [100 + 4 * i + j for j in range(4)],
            }
        )
    trace = tmp_path / "scan.jsonl"
    trace.write_text("".join(json.dumps(line) + "\n" for line in lines))
    requests = class_bound.load(str(trace), 512)
    classes, used_again = class_bound.classify(requests, ["turn", "seen", "last", "size"])
    chance, counts = class_bound.chances(classes, used_again)
    p = [chance[c] for c in classes]
    assert class_bound.lru(requests, 3) == 0
    ranked = class_bound.replay(requests, 3, lambda ref, t: t + 600 * p[ref], lambda ref: True)
    future = class_bound.lru(requests, 3, lambda ref: used_again[ref])
    assert ranked == future == 100.0 * 2 * 39 / 240
    assert class_bound.auc(counts) > 0.9
