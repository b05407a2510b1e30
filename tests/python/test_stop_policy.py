"""feather's stop policies: make, decide, reward, save/load, and their error paths."""

import json
import random

import pytest

import feather

NAMES = ["always", "heuristic", "bandit", "qlearning", "dynamic-batching", "bandit-authors",
         "bandit-delayed", "mpc", "converge", "converge-shape"]


def random_context(rng):
    before = rng.randrange(0, 40)
    return feather.StopContext(
        batch_size=rng.randrange(0, 64),
        admitted_this_round=rng.randrange(0, 8),
        signal=feather.PrefixSignal(tip_before_chunks=before,
                                    tip_after_chunks=rng.randrange(0, before + 1),
                                    peers=rng.randrange(1, 50), chunk_tokens=50),
        waiting=rng.randrange(1, 100),
        kv_used_blocks=rng.randrange(0, 1000), kv_total_blocks=1000,
        candidate_blocks=rng.randrange(1, 40))


def drive(policy, seed, rounds=60):
    """Runs the BeginRound / Decide... / OnStepExecuted loop; returns the decisions."""
    rng = random.Random(seed)
    decisions = []
    for _ in range(rounds):
        policy.begin_round()
        for _ in range(rng.randrange(1, 6)):
            decision = policy.decide(random_context(rng))
            decisions.append(decision)
            if decision == feather.StopDecision.stop:
                break
        policy.on_step_executed(feather.StepFeedback(
            batch_size=rng.randrange(1, 64), decode_tokens=rng.randrange(1, 64),
            step_ns=rng.randrange(1_000_000, 50_000_000)))
    return decisions


def test_names():
    assert feather.stop_policy_names() == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_every_policy_decides_and_learns(name):
    policy = feather.make_stop_policy(name)
    assert policy.name() == name and policy.learning
    decisions = drive(policy, seed=1)
    assert all(isinstance(d, feather.StopDecision) for d in decisions)
    if name == "always":
        assert set(decisions) == {feather.StopDecision.add}
    assert repr(policy) == f"StopPolicy({name}, learning)"


@pytest.mark.parametrize("name", NAMES)
def test_save_load_round_trip(name, tmp_path):
    trained = feather.make_stop_policy(name, seed=7)
    drive(trained, seed=2)
    path = tmp_path / f"{name}.json"
    trained.save(str(path))
    text = path.read_text()
    assert text == trained.to_json()
    assert json.loads(text)["kind"] == name

    loaded = feather.make_stop_policy(name)
    loaded.load(str(path))
    assert loaded.to_json() == text  # save -> load -> save is byte-identical
    copy = feather.make_stop_policy(name)
    copy.from_json(text)
    assert copy.to_json() == text
    # Frozen, the trained policy and its copy decide alike and stay unchanged.
    trained.learning = False
    loaded.learning = False
    assert drive(trained, seed=3) == drive(loaded, seed=3)
    assert loaded.to_json() == text or name == "qlearning"  # qlearning's rng still advances


def test_options_reach_the_policy():
    policy = feather.make_stop_policy("bandit", exploration=12.5,
                                      state_bins=feather.StateBins.exponential)
    options = json.loads(policy.to_json())["options"]
    assert options["exploration"] == 12.5 and options["state_bins"] == "exponential"
    policy = feather.make_stop_policy("heuristic", max_loss_chunks=2, relaxed_loss_chunks=3,
                                      floor_cap=4)
    options = json.loads(policy.to_json())["options"]
    assert options["max_loss_chunks"] == 2 and options["floor_cap"] == 4


@pytest.mark.parametrize("name", ["heuristic", "bandit", "qlearning", "dynamic-batching"])
def test_knobs_follow_the_policys_field_table(name):
    # Every knob stop_policy_knobs lists is accepted at its default and lands in the saved
    # options under the same key, in the same order (one table drives both).
    knobs = feather.stop_policy_knobs(name)
    assert knobs, name
    policy = feather.make_stop_policy(name, **{k: v["default"] for k, v in knobs.items()})
    saved = json.loads(policy.to_json())["options"]
    assert [k for k in saved if k in knobs] == list(knobs)
    for key, knob in knobs.items():
        assert saved[key] == knob["default"]
        assert knob["range"].startswith("in ")
    assert feather.stop_policy_knobs("always") == {}


def test_step_reward():
    assert feather.step_reward(feather.StepFeedback(decode_tokens=50, step_ns=10**8)) == 500.0
    assert feather.step_reward(feather.StepFeedback(decode_tokens=50, step_ns=0)) is None


def test_policy_from_scenario(repo_root):
    assert feather.stop_policy_from_scenario().name() == "converge"  # the built-in default
    policy = feather.stop_policy_from_scenario(
        repo_root / "scenarios" / "default.yaml", {"scheduler.stop": "heuristic"})
    assert policy.name() == "heuristic"


def test_bad_input_raises(tmp_path):
    with pytest.raises(ValueError, match="bandits"):
        feather.make_stop_policy("bandits")
    with pytest.raises(ValueError, match=r"exploration = -1.0: must be in \[0, 1e\+12\]"):
        feather.make_stop_policy("bandit", exploration=-1.0)
    with pytest.raises(ValueError, match="must be"):
        feather.make_stop_policy("heuristic", floor_cap=2**40)  # never narrowed silently
    with pytest.raises(ValueError, match="relaxed_loss_chunks"):
        feather.make_stop_policy("heuristic", relaxed_loss_chunks=1)  # below max_loss_chunks
    with pytest.raises(TypeError, match="unknown option 'explore'"):
        feather.make_stop_policy("bandit", explore=1.0)
    with pytest.raises(TypeError, match="unknown option 'exploration'"):
        feather.make_stop_policy("always", exploration=1.0)
    with pytest.raises(TypeError, match="expected an integer"):
        feather.make_stop_policy("heuristic", floor_cap=2.5)
    with pytest.raises(TypeError, match="expected a number"):
        feather.make_stop_policy("bandit", exploration=True)
    with pytest.raises(TypeError):
        feather.make_stop_policy("bandit", seed=-5)
    with pytest.raises(TypeError):
        feather.StopContext(batch_size=-1)
    with pytest.raises(TypeError):
        feather.make_stop_policy("always").decide(None)

    bandit = feather.make_stop_policy("bandit")
    with pytest.raises(RuntimeError, match="missing.json"):
        bandit.load(str(tmp_path / "missing.json"))
    (tmp_path / "heuristic.json").write_text(feather.make_stop_policy("heuristic").to_json())
    with pytest.raises(RuntimeError, match="heuristic"):
        bandit.load(str(tmp_path / "heuristic.json"))
    with pytest.raises(RuntimeError, match="notes.txt"):
        bandit.from_json("{not json", "notes.txt")
    with pytest.raises(RuntimeError):
        bandit.save(str(tmp_path / "no" / "such" / "dir" / "p.json"))
    assert bandit.to_json() == feather.make_stop_policy("bandit").to_json()  # unchanged

    with pytest.raises(feather.InputError, match="scheduler.stop"):
        feather.stop_policy_from_scenario(None, {"scheduler.stop": "nope"})
    with pytest.raises(ValueError):  # InputError is a ValueError
        feather.stop_policy_from_scenario(tmp_path / "none.yaml")
