#!/usr/bin/env python3
"""How far a cache policy that ranks blocks by class can go on a trace, with perfect statistics.

A policy that learns online (the Store's ReturnModel) can at best know, for each class of block,
the chance that a block of that class is used again. This script gives such a policy that
chance exactly, taken from the whole trace beforehand (which no online policy can know), and
replays the trace with the request protocol of `kvtier replay --compare`: a request's hits are
its longest resident prefix of whole blocks, and the blocks after it are stored in order, a
resident one counting as an access (tools/planning/reference_policies.h).

Policies, per capacity in blocks:
  LRU            as `kvtier replay --compare` replays it (the two columns must agree);
  rank, W        evicts the block with the lowest last access (seconds) + W x the chance that a
                 block of its class, at its last access, is used again; the best W of a sweep;
  rank+bypass    the same, and a block whose class is used again less often than a threshold
                 (the best of a sweep) is not stored;
  LRU+future     LRU that stores no block without a later use: per-block knowledge, what the
                 classes are measured against.

Classes (per reference, known when it happens; --classes picks the features):
  turn   the conversation's turn, 0 to 5 and more (a request that adds blocks after an earlier
         request's last whole block, that block not a branch point, is a turn deeper; one
         that adds none after it reads it again, at its turn);
  depth  the same, 0 to 7 and more, as many as the Store's depth classes;
  seen   whether the block was referenced before;
  last   whether it is the request's last whole block;
  size   how many blocks the request added (log2 buckets: 0, 1, 2-3, 4-7, 8-15, 16-31, 32+);
  tail   whether it is the 16th block the request added or later: the Store's tail of a long turn;
  gap    the time since the request the turn extends (under 1 s, then log2 buckets of
         seconds; none without such a request).
The default is turn,seen,last,size; depth,tail are classes like the Store's. It also prints how well
the classes tell blocks used again from blocks never used again: the area under the ROC curve
of the class's chance as a predictor (0.5: no better than a coin; 1: perfect).

Usage: bench/class_bound.py TRACE CAPACITY_BLOCKS... [--block-tokens 512] [--classes LIST]
       [--weights W,W,...]
Mooncake's and `kvtier trace gen`'s JSON-lines formats (tenants keep separate key spaces).
"""

import argparse
import heapq
import itertools
import json
import math
from collections import defaultdict


def load(path, block_tokens):
    """Per request, in time order as `kvtier replay` orders them: (seconds, list of block ids).
    Ids are (tenant, hash id). A kvtier trace's header sets the block size; `block_tokens` is
    that of a trace without one."""
    requests = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
                if "kvtier_trace" in r:
                    block_tokens = r["block_tokens"]
                    continue
                whole = min(len(r["hash_ids"]), r["input_length"] // block_tokens)
                tenant = r.get("tenant", "default")
                blocks = [(tenant, h) for h in r["hash_ids"][:whole]]
                requests.append((r["timestamp"] / 1000.0, blocks))
            except (ValueError, KeyError, TypeError) as e:
                raise SystemExit(f"{path}:{number}: not a trace line ({e!r}): {line[:200]}") from e
    requests.sort(key=lambda r: r[0])
    return requests


def log2_bucket(x, cap):
    """0 below 1, then 1 + floor(log2(x)), at most cap."""
    return 0 if x < 1 else min(int(math.log2(x)) + 1, cap)


FEATURES = ("turn", "depth", "seen", "last", "size", "tail", "gap")


def classify(requests, features):
    """Per reference (request order, then block order): its class, a tuple of `features`, and
    whether its block is used again later."""
    last_request_of = {}  # Block -> the latest request whose last whole block it is.
    successors = defaultdict(set)  # Block -> the distinct blocks that followed it.
    turn = []
    seen = set()
    classes = []
    for r, (t, blocks) in enumerate(requests):
        # The turn: one deeper than the request whose last block this one extends; a request
        # that adds nothing after that block reads it again, at its depth.
        parent, extends = None, False
        for j in range(len(blocks) - 1, -1, -1):
            p = last_request_of.get(blocks[j])
            if p is not None and len(successors[blocks[j]]) < 2:
                parent, extends = p, j < len(blocks) - 1
                break
        turn.append(0 if parent is None else turn[parent] + extends)
        new = len({b for b in blocks if b not in seen})
        f = {
            "turn": min(turn[r], 5),
            "depth": min(turn[r], 7),
            "size": log2_bucket(new, 6),
            "gap": 0 if parent is None else 1 + log2_bucket(t - requests[parent][0], 12),
        }
        added = set()
        for i, b in enumerate(blocks):
            f["seen"] = b in seen
            f["last"] = i == len(blocks) - 1
            if b not in seen:
                added.add(b)
            f["tail"] = b not in seen and len(added) >= 16
            classes.append(tuple(f[name] for name in features))
        for a, b in itertools.pairwise(blocks):
            successors[a].add(b)
        seen.update(blocks)
        if blocks:
            last_request_of[blocks[-1]] = r
    used_again = []
    later = set()
    for _, blocks in reversed(requests):
        for b in reversed(blocks):
            used_again.append(b in later)
            later.add(b)
    used_again.reverse()
    return classes, used_again


def chances(classes, used_again):
    counts = defaultdict(lambda: [0, 0])
    for c, u in zip(classes, used_again, strict=True):
        counts[c][0] += 1
        counts[c][1] += u
    return {c: n_used / n for c, (n, n_used) in counts.items()}, counts


def auc(counts):
    """Area under the ROC curve of the class chance as a predictor of a later use."""
    cells = sorted(counts.values(), key=lambda v: v[1] / v[0])
    positives = sum(u for _, u in cells)
    negatives = sum(n - u for n, u in cells)
    if positives == 0 or negatives == 0:
        return math.nan
    area, below = 0.0, 0
    for n, u in cells:
        area += u * (below + (n - u) / 2)
        below += n - u
    return area / positives / negatives


def replay(requests, capacity, priority, admit):
    """Block hit ratio. priority(ref, t) orders eviction (lowest first); admit(ref) says
    whether a missing block is stored."""
    resident = {}  # Block -> its current priority key.
    heap = []
    hits = references = 0
    ref = 0
    for t, blocks in requests:
        i = 0
        while i < len(blocks) and blocks[i] in resident:
            i += 1
        hits += i
        references += len(blocks)
        for b in blocks:
            if b in resident or admit(ref):
                if b not in resident and len(resident) >= capacity:
                    while True:
                        key, victim = heapq.heappop(heap)
                        if resident.get(victim) == key:
                            del resident[victim]
                            break
                key = (priority(ref, t), ref)
                resident[b] = key
                heapq.heappush(heap, (key, b))
            ref += 1
    return 100.0 * hits / references


def lru(requests, capacity, admit=lambda ref: True):
    """Block hit ratio of LRU (the reference index orders every access), storing what admit
    lets in."""
    return replay(requests, capacity, lambda ref, t: 0.0, admit)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("capacities", type=int, nargs="+", help="G2 capacities, in blocks")
    ap.add_argument(
        "--block-tokens",
        type=int,
        default=512,
        help="tokens per block of a trace without a kvtier header",
    )
    ap.add_argument(
        "--classes",
        default="turn,seen,last,size",
        help="features of a class, of " + ", ".join(FEATURES) + " (like the Store's: depth,tail)",
    )
    ap.add_argument(
        "--weights",
        default="0,60,150,300,600,900,1200,1800,2400,3600,4800",
        help="the values of W (seconds) to sweep",
    )
    args = ap.parse_args()
    if min(args.capacities) < 1:
        ap.error("a capacity is at least one block")
    features = args.classes.split(",")
    unknown = [name for name in features if name not in FEATURES]
    if unknown:
        ap.error(f"unknown class features {unknown}: choose of {', '.join(FEATURES)}")
    requests = load(args.trace, args.block_tokens)
    classes, used_again = classify(requests, features)
    chance, counts = chances(classes, used_again)
    p = [chance[c] for c in classes]
    print(
        f"{len(requests)} requests, {len(classes)} whole-block references, {len(counts)} classes;"
        f" area under the ROC curve of the class chance: {auc(counts):.3f}"
    )
    weights = [int(w) for w in args.weights.split(",")]
    thresholds = [0.05, 0.1, 0.2]
    print(
        f"{'capacity':>10s} {'LRU':>8s} {'rank, best W':>16s} {'rank+bypass':>20s}"
        f" {'LRU+future':>11s}"
    )
    for capacity in args.capacities:
        plain = lru(requests, capacity)
        ranked = max(
            (replay(requests, capacity, lambda ref, t, w=w: t + w * p[ref], lambda ref: True), w)
            for w in weights
        )
        w = ranked[1]
        bypass = max(
            (
                replay(
                    requests,
                    capacity,
                    lambda ref, t, w=w: t + w * p[ref],
                    lambda ref, x=x: p[ref] >= x,
                ),
                x,
            )
            for x in thresholds
        )
        future = lru(requests, capacity, lambda ref: used_again[ref])
        print(
            f"{capacity:10d} {plain:7.2f}% {ranked[0]:7.2f}% (W {w:4d} s) "
            f"{bypass[0]:7.2f}% (W {w}, < {bypass[1]:.2f}) {future:10.2f}%"
        )


if __name__ == "__main__":
    main()
