"""feather.ChunkedHashTree against a brute-force reference, and its error paths."""

import math
import random

import numpy as np
import pytest

import feather


def common_prefix(prompts):
    """The longest common prefix, in chunks, of lists of chunk keys (0 for none)."""
    if not prompts:
        return 0
    common = len(prompts[0])
    for keys in prompts[1:]:
        c = 0
        while c < common and c < len(keys) and keys[c] == prompts[0][c]:
            c += 1
        common = c
    return common


class Reference:
    """The CHT's semantics from scratch (cht/reference_cht.h), keyed without hashing.

    A request is a list of chunk keys: key c is the whole prefix up to chunk c (a tuple), so
    equal keys mean equal prefixes by construction. Its state: "waiting", "active", "parked"
    (passed over this round: neither waiting nor in the working set) or "retained" (finished,
    still cached: in the working set, not in the batch that tips and peers count).
    """

    def __init__(self):
        self.requests = {}  # id -> [keys, seq, state]
        self.seq = 0

    def insert(self, rid, keys):
        self.requests[rid] = [keys, self.seq, "waiting"]
        self.seq += 1

    def working_set(self, batch_only=False):
        states = ("active",) if batch_only else ("active", "retained")
        return {(c, k) for keys, _, state in self.requests.values() if state in states
                for c, k in enumerate(keys, 1)}

    def level_shared_by_all(self):
        return common_prefix([keys for keys, _, _ in self.requests.values()])

    def missing(self, rid, ws=None):
        ws = self.working_set() if ws is None else ws
        return sum((c, k) not in ws for c, k in enumerate(self.requests[rid][0], 1))

    def tip(self):
        return common_prefix([keys for keys, _, state in self.requests.values()
                              if state == "active"])

    def in_state(self, wanted):
        return sorted(r for r, (_, _, state) in self.requests.items() if state == wanted)

    def waiting(self):
        return self.in_state("waiting")

    def active(self):
        return self.in_state("active")

    def parked(self):
        return self.in_state("parked")

    def find_best(self):
        ws = self.working_set()
        waiting = self.waiting()
        if not waiting:
            return None
        best = min(waiting, key=lambda r: (self.missing(r, ws), self.requests[r][1]))
        keys = self.requests[best][0]
        before = self.tip()
        after = 0
        if self.active():
            batch_ws = self.working_set(batch_only=True)
            for level in range(min(before, len(keys)), 0, -1):
                if (level, keys[level - 1]) in batch_ws:
                    after = level
                    break
        peers = sum(
            1 for r in waiting
            if after == 0 or (len(self.requests[r][0]) >= after
                              and self.requests[r][0][after - 1] == keys[after - 1]))
        return (best, before, after, peers, self.missing(best, ws))


def token_keys(tokens, chunk_tokens):
    """Chunk c of a prompt is its first min(c * K, T) tokens (cht/prefix_hash.h)."""
    chunks = math.ceil(len(tokens) / chunk_tokens)
    return [tuple(tokens[:min(c * chunk_tokens, len(tokens))]) for c in range(1, chunks + 1)]


def block_keys(blocks):
    return [tuple(blocks[:c]) for c in range(1, len(blocks) + 1)]


def assert_same(tree, ref):
    assert tree.num_waiting() == len(ref.waiting())
    assert tree.num_active() == len(ref.active())
    assert tree.tip_level() == ref.tip()
    assert tree.num_retained() == len(ref.in_state("retained"))
    assert tree.level_shared_by_all() == ref.level_shared_by_all()
    for rid in ref.in_state("retained"):
        assert tree.is_retained(rid) and not tree.is_active(rid) and not tree.is_waiting(rid)
    ws = ref.working_set()
    for rid in ref.waiting():
        assert tree.is_waiting(rid) and not tree.is_active(rid)
        assert tree.missing_count(rid) == ref.missing(rid, ws), rid
        assert tree.num_chunks_of(rid) == len(ref.requests[rid][0])
    for rid in ref.active():
        assert tree.is_active(rid) and not tree.is_waiting(rid) and not tree.is_parked(rid)
    for rid in ref.parked():
        assert tree.is_parked(rid) and not tree.is_waiting(rid) and not tree.is_active(rid)
        assert tree.num_chunks_of(rid) == len(ref.requests[rid][0])
    best = tree.find_best()
    want = ref.find_best()
    if want is None:
        assert best is None
    else:
        got = (best.request, best.tip_before, best.tip_after, best.peers, best.missing)
        assert got == want


def random_prompt(rng, groups, use_blocks, chunk_tokens):
    """A prompt sharing one of a few random prefixes, with a short random suffix."""
    group = groups[rng.randrange(len(groups))]
    shared = group[: rng.randrange(len(group) + 1)]
    if use_blocks:
        return shared + [rng.randrange(4) for _ in range(rng.randrange(4))]
    suffix = [rng.randrange(3) for _ in range(rng.randrange(3 * chunk_tokens))]
    return shared + suffix


@pytest.mark.parametrize("use_blocks", [False, True], ids=["tokens", "blocks"])
@pytest.mark.parametrize("seed", range(12))
def test_matches_brute_force_reference(seed, use_blocks):
    rng = random.Random(seed)
    chunk_tokens = rng.choice([1, 2, 3, 5])
    scheme = rng.choice([feather.HashScheme.streaming, feather.HashScheme.chained,
                         feather.HashScheme.striped, feather.HashScheme.aes])
    tree = feather.ChunkedHashTree(chunk_tokens=chunk_tokens, hash_scheme=scheme)
    ref = Reference()
    length = 6 if use_blocks else 6 * chunk_tokens
    groups = [[rng.randrange(3) for _ in range(length)] for _ in range(3)]
    free_ids = list(range(40))
    rng.shuffle(free_ids)
    for _ in range(300):
        op = rng.random()
        waiting, active = ref.waiting(), ref.active()
        if op < 0.3 and free_ids:
            rid = free_ids.pop()
            prompt = random_prompt(rng, groups, use_blocks, chunk_tokens)
            if use_blocks:
                tree.insert_blocks(rid, prompt)
                ref.insert(rid, block_keys(prompt))
            else:
                tree.insert(rid, np.array(prompt, dtype=np.int32) if rng.random() < 0.5
                            else prompt)
                ref.insert(rid, token_keys(prompt, chunk_tokens))
        elif op < 0.55 and waiting:
            best = tree.find_best()
            rid = best.request if rng.random() < 0.7 else rng.choice(waiting)
            tree.add_to_batch(rid)
            ref.requests[rid][2] = "active"
        elif op < 0.62 and active:
            rid = rng.choice(active)
            tree.finish(rid)
            del ref.requests[rid]
            free_ids.append(rid)
        elif op < 0.7 and active:  # finished, its KV still cached
            rid = rng.choice(active)
            tree.retain(rid)
            ref.requests[rid][2] = "retained"
        elif op < 0.75 and ref.in_state("retained"):  # the cache evicted it
            rid = rng.choice(ref.in_state("retained"))
            tree.forget(rid)
            del ref.requests[rid]
            free_ids.append(rid)
        elif op < 0.8 and (waiting or ref.parked()):
            rid = rng.choice(waiting + ref.parked())
            tree.remove(rid)
            del ref.requests[rid]
            free_ids.append(rid)
        elif op < 0.9 and active:
            rid = rng.choice(active)
            tree.requeue(rid)
            ref.requests[rid][2] = "waiting"
        elif op < 0.95 and waiting:  # a round passes over the proposal (StopDecision.skip)
            rid = tree.find_best().request
            tree.park(rid)
            ref.requests[rid][2] = "parked"
        elif ref.parked():  # the round ends
            for rid in ref.parked():
                tree.unpark(rid)
                ref.requests[rid][2] = "waiting"
        assert_same(tree, ref)


def test_shared_prefix_walkthrough():
    tree = feather.ChunkedHashTree(chunk_tokens=2)
    tree.insert(0, [1, 2, 3, 4, 5, 6])
    tree.insert(1, [1, 2, 3, 4, 9, 9])
    tree.insert(2, [7] * 6)
    assert tree.find_best().request == 0  # all miss every chunk: the earliest wins
    tree.add_to_batch(0)
    assert tree.tip_level() == 3
    best = tree.find_best()
    assert best == tree.find_best()
    assert (best.request, best.missing, best.tip_before, best.tip_after) == (1, 1, 3, 2)
    assert tree.missing_count(2) == 3
    assert "ChtCandidate(request=1" in repr(best)
    tree.add_to_batch(1)
    assert tree.tip_level() == 2
    tree.finish(0)
    assert tree.tip_level() == 3
    tree.requeue(1)
    assert tree.num_active() == 0 and tree.num_waiting() == 2
    assert tree.num_nodes() >= 1 and tree.memory_bytes() > 0


def test_prefix_hashes():
    tokens = list(range(10))
    hashes = feather.prefix_hashes(tokens, chunk_tokens=3)
    assert hashes.dtype == np.uint64 and hashes.shape == (4,)
    other = feather.prefix_hashes(tokens[:6] + [99], chunk_tokens=3)
    assert list(other[:2]) == list(hashes[:2]) and other[2] != hashes[2]
    chained = feather.prefix_hashes(tokens, 3, feather.HashScheme.chained)
    assert list(chained) != list(hashes)
    assert len(feather.prefix_hashes([], 3)) == 0


def test_bad_input_raises_and_leaves_the_tree_unchanged():
    tree = feather.ChunkedHashTree(chunk_tokens=2)
    tree.insert(0, [1, 2, 3])
    tree.insert(1, [1, 2])
    tree.add_to_batch(1)
    with pytest.raises(ValueError, match=r"insert\(0\): the id is already in the tree \(waiting\)"):
        tree.insert(0, [5])
    with pytest.raises(ValueError, match="already in the tree"):
        tree.insert_blocks(1, [5])
    with pytest.raises(ValueError, match=r"add_to_batch\(1\): the request is active, not waiting"):
        tree.add_to_batch(1)
    with pytest.raises(ValueError, match="not in the tree"):
        tree.add_to_batch(7)
    with pytest.raises(ValueError, match=r"finish\(0\): the request is waiting, not active"):
        tree.finish(0)
    with pytest.raises(ValueError, match="remove"):
        tree.remove(1)
    with pytest.raises(ValueError, match="requeue"):
        tree.requeue(0)
    with pytest.raises(ValueError, match="missing_count"):
        tree.missing_count(1)
    with pytest.raises(ValueError, match="num_chunks_of"):
        tree.num_chunks_of(5)
    with pytest.raises(ValueError, match=r"park\(1\): the request is active, not waiting"):
        tree.park(1)
    with pytest.raises(ValueError, match=r"unpark\(0\): the request is waiting, not parked"):
        tree.unpark(0)
    tree.park(0)
    with pytest.raises(ValueError, match=r"insert\(0\): the id is already in the tree \(parked\)"):
        tree.insert(0, [5])
    with pytest.raises(ValueError, match=r"add_to_batch\(0\): the request is parked"):
        tree.add_to_batch(0)
    tree.unpark(0)
    with pytest.raises(ValueError, match=r"retain\(0\): the request is waiting, not active"):
        tree.retain(0)
    with pytest.raises(ValueError, match=r"forget\(1\): the request is active, not retained"):
        tree.forget(1)
    with pytest.raises(ValueError, match="is over"):
        tree.insert(feather.ChunkedHashTree.max_request_id + 1, [1])
    with pytest.raises(TypeError):
        tree.insert(-1, [1])
    with pytest.raises(TypeError):
        tree.insert(3, [2**40])  # not an int32 token
    with pytest.raises(TypeError):
        tree.insert(3, "abc")
    with pytest.raises(TypeError):
        tree.insert_blocks(3, [-1])
    assert (tree.num_waiting(), tree.num_active(), tree.tip_level()) == (1, 1, 1)
    assert tree.missing_count(0) == 1
    with pytest.raises(ValueError, match="chunk_tokens must be positive"):
        feather.ChunkedHashTree(chunk_tokens=0)
    with pytest.raises(ValueError, match="chunk_tokens must be positive"):
        feather.prefix_hashes([1], 0)


def test_a_retained_request_keeps_its_chunks_until_forgotten():
    tree = feather.ChunkedHashTree(chunk_tokens=1)
    tree.insert_blocks(0, [1, 2, 3])
    tree.add_to_batch(0)
    tree.retain(0)
    assert tree.is_retained(0) and tree.num_retained() == 1 and tree.num_active() == 0
    with pytest.raises(ValueError, match=r"\(0\): the id is already in the tree \(retained\)"):
        tree.insert_blocks(0, [5])
    tree.insert_blocks(1, [1, 2, 3, 4])  # continues it: misses 1 chunk of 4
    tree.insert_blocks(2, [9, 9])
    assert tree.missing_count(1) == 1 and tree.find_best().request == 1
    assert tree.find_best().tip_before == 0  # the batch is empty
    assert tree.level_shared_by_all() == 0
    tree.forget(0)
    assert tree.num_retained() == 0 and tree.missing_count(1) == 4
    assert tree.find_best().request == 2
    tree.remove(2)
    assert tree.level_shared_by_all() == 4  # request 1 alone


def test_ids_are_reusable_after_finish_and_remove():
    tree = feather.ChunkedHashTree(chunk_tokens=1)
    for _ in range(3):
        tree.insert(5, [1, 2])
        tree.add_to_batch(5)
        tree.finish(5)
        tree.insert(5, [3])
        tree.remove(5)
    assert tree.num_waiting() == 0 and tree.find_best() is None
