"""mix / prerollout at intake: verl's own dataset and collate path, ``_next_train_batch``.

No Ray: intake happens on the driver before prompts are submitted for generation.
"""

import logging
import pickle

import pytest

pytest.importorskip("verl")

import pandas as pd  # noqa: E402

from dataflex_rl.core.batch import from_lists  # noqa: E402
from dataflex_rl.core.registry import ConfigError  # noqa: E402
from dataflex_rl.hosts.common.state import load_state, save_state  # noqa: E402
from tests.hosts.verl_helpers import dataflex_trainer  # noqa: E402

# torchdata's StatefulDataLoader calls a deprecated torch API
pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated:UserWarning")
DOMAINS = {"math": 12, "logic": 6, "science": 6}


def write_dataset(path, with_domain=True):
    rows = []
    for name, count in DOMAINS.items():
        for i in range(count):
            row = {
                "prompt": [{"role": "user", "content": f"{name} question {i}"}],
                "data_source": f"src_{name}",
                "reward_model": {"style": "rule", "ground_truth": str(i)},
                "extra_info": {"index": i, "split": "train"},
            }
            if with_domain:
                row["domain"] = name
            rows.append(row)
    pd.DataFrame(rows).to_parquet(path)
    return str(path)


def intake_trainer(tmp_path, strategy_overrides, with_domain=True, batch_size=6):
    data = write_dataset(tmp_path / "train.parquet", with_domain)
    trainer = dataflex_trainer(
        f"data.train_files={data}",
        f"data.val_files={data}",
        f"data.train_batch_size={batch_size}",
        "data.dataloader_num_workers=0",
        *strategy_overrides,
        build=False,
    )
    trainer.tokenizer = trainer.processor = None  # filter_overlong_prompts is off
    trainer.global_steps = 1
    trainer._init_dataloader()
    return trainer


def static(prior):
    return [
        "+dataflex.strategy.mix.actuator.name=static",
        "+dataflex.strategy.mix.actuator.floor=0.0",
        f"+dataflex.strategy.mix.prior={prior}",
    ]


def test_mixing_decides_which_prompts_are_submitted(tmp_path):
    trainer = intake_trainer(tmp_path, static("{math:0.5,logic:0.5,science:0.0}"))
    assert trainer.driver.intake.domains == ("logic", "math", "science")
    batch = trainer._next_train_batch()
    assert len(batch) == 6 and len(set(batch["uid"])) == 6
    assert sorted(batch["domain"]) == ["logic"] * 3 + ["math"] * 3
    assert int(batch["global_steps"]) == 1 and "raw_prompt" in batch.keys()
    m = trainer.driver.pending
    assert m["dataflex/mix/domain/science/target"] == 0.0
    assert m["dataflex/mix/domain/logic/actual"] == pytest.approx(0.5)
    # every submitted uid is remembered with its row and domain for the decide step
    assert set(trainer._prompts) == set(batch["uid"])
    # refills (DAPO, failed groups) go through the same path, with their own count
    assert len(trainer._next_train_batch(2)) == 2


def test_without_a_domain_column_domains_come_from_data_source(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="dataflex_rl.hosts.verl")
    trainer = intake_trainer(tmp_path, ["+dataflex.strategy=reward_gap"], with_domain=False)
    assert trainer.driver.intake.domains == ("src_logic", "src_math", "src_science")
    assert "domains come from the 'data_source' column" in caplog.text
    batch = trainer._next_train_batch()
    # reward_gap starts from the uniform prior: 2 + 2 + 2
    assert (
        sorted(batch["data_source"]) == ["src_logic"] * 2 + ["src_math"] * 2 + ["src_science"] * 2
    )


def test_a_set_domain_key_that_is_not_a_column_fails_listing_the_columns(tmp_path):
    with pytest.raises(
        ConfigError,
        match=r"'domain' is not a column of the training set "
        r"\(columns: .*'data_source'",
    ):
        intake_trainer(
            tmp_path,
            ["+dataflex.strategy=reward_gap", "+dataflex.domain_key=domain"],
            with_domain=False,
        )


def test_prerollout_skips_prompts_whose_groups_were_all_solved(tmp_path):
    greso = [
        "+dataflex.strategy.prerollout.actuator.name=greso",
        "+dataflex.strategy.prerollout.actuator.explore_prob=0.0",
        "+dataflex.strategy.prerollout.actuator.min_explore=0.0",
    ]
    trainer = intake_trainer(tmp_path, greso, batch_size=4)
    first = trainer._next_train_batch()
    rows = [trainer._prompts[u][0] for u in first["uid"]]
    # those 4 prompts were solved by all of their 2 samples at step 0
    keys = tuple(r for r in rows for _ in range(2))
    trainer.driver.strategy.decide(
        from_lists([1.0] * 8, [g for g in range(4) for _ in range(2)], prompt_keys=keys, step=0)
    )
    trainer.global_steps = 2
    later = [trainer._prompts[u][0] for _ in range(5) for u in trainer._next_train_batch()["uid"]]
    assert len(later) == 20 and not set(later) & set(rows)
    assert trainer.driver.pending["dataflex/prerollout/active"] == 1.0


def test_intake_and_strategy_state_round_trip(tmp_path):
    spec = ["+dataflex.strategy=reward_gap"]
    a = intake_trainer(tmp_path, spec)
    a._next_train_batch()
    path = save_state(tmp_path / "dataflex_state.safetensors", a.driver.state_dict())
    b = intake_trainer(tmp_path, spec)
    b.driver.load_state_dict(load_state(path))
    rows_a = [a._prompts[u][0] for u in a._next_train_batch()["uid"]]
    rows_b = [b._prompts[u][0] for u in b._next_train_batch()["uid"]]
    assert rows_a == rows_b


def test_checkpoint_hooks_write_the_state_file_and_refuse_a_pickled_payload(tmp_path, monkeypatch):
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from dataflex_rl.core.statefile import StateFileError

    monkeypatch.setattr(PPOTrainerSync, "_save_checkpoint", lambda self: None)
    monkeypatch.setattr(PPOTrainerSync, "_load_checkpoint", lambda self: None)
    spec = [
        "+dataflex.strategy=reward_gap",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        "trainer.resume_mode=auto",
    ]
    a = intake_trainer(tmp_path, spec)
    a._next_train_batch()
    a.global_steps = 2
    a._save_checkpoint()
    folder = tmp_path / "ckpt" / "global_step_2"
    assert [p.name for p in folder.iterdir()] == ["dataflex_state.safetensors"]
    (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").write_text("2")
    b = intake_trainer(tmp_path, spec)
    b.global_steps = 2  # what verl's own _load_checkpoint sets
    b._load_checkpoint()
    rows_a = [a._prompts[u][0] for u in a._next_train_batch()["uid"]]
    rows_b = [b._prompts[u][0] for u in b._next_train_batch()["uid"]]
    assert rows_a == rows_b
    # a pickle in its place is refused and never runs
    marker = tmp_path / "EXECUTED"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    (folder / "dataflex_state.safetensors").write_bytes(pickle.dumps({"strategy": Payload()}))
    c = intake_trainer(tmp_path, spec)
    c.global_steps = 2
    with pytest.raises(StateFileError, match=r"dataflex_state\.safetensors: a pickle .*refused"):
        c._load_checkpoint()
    assert not marker.exists()


def test_select_only_strategy_leaves_verls_dataloader_alone(tmp_path):
    trainer = intake_trainer(tmp_path, ["+dataflex.strategy=difffilter"])
    assert trainer.driver.intake is None
    batch = trainer._next_train_batch()  # verl's own StatefulDataLoader
    assert len(batch) == 6 and trainer._prompts == {}


def test_generation_seconds_are_this_batchs_share_of_verls_gen_timer():
    from types import SimpleNamespace

    from dataflex_rl.hosts.verl.trainer import DataflexTrainer

    t = SimpleNamespace(timing_raw={}, _gen_mark=(-1, 0.0), global_steps=3)
    seconds = DataflexTrainer._generation_seconds
    assert seconds(t) is None  # outside fit: no gen timer
    t.timing_raw = {"gen": 5.0}
    assert seconds(t) == 5.0  # first batch of step 3
    t.timing_raw["gen"] = 7.5  # parameter_sync_step > 1: accumulated
    assert seconds(t) == 2.5
    t.global_steps, t.timing_raw = 4, {"gen": 4.0}  # a new step starts a new timer
    assert seconds(t) == 4.0


def test_curriculum_draws_away_from_solved_prompts_at_the_mixs_counts(tmp_path):
    # target 0 at width .05: a prompt seen all-solved (pass rate 1) weighs e^-200, one never
    # seen (the prior .5) e^-50: the solved ones are not drawn while others are left; the
    # per-domain counts are the plain intake's; the state file carries the history
    cur = [
        "+dataflex.strategy.curriculum.actuator.name=target_difficulty",
        "+dataflex.strategy.curriculum.actuator.target=0.0",
        "+dataflex.strategy.curriculum.actuator.width=0.05",
    ]
    trainer = intake_trainer(tmp_path, cur, batch_size=4)
    plain = intake_trainer(tmp_path, static("{math:0.5,logic:0.25,science:0.25}"), batch_size=4)
    first = trainer._next_train_batch()
    assert sorted(first["domain"]) == sorted(plain._next_train_batch()["domain"])
    rows = [trainer._prompts[u][0] for u in first["uid"]]
    keys = tuple(r for r in rows for _ in range(2))
    trainer.driver.strategy.decide(
        from_lists([1.0] * 8, [g for g in range(4) for _ in range(2)], prompt_keys=keys, step=0)
    )
    trainer.global_steps = 2
    path = save_state(tmp_path / "dataflex_state.safetensors", trainer.driver.state_dict())
    later = []
    for step in range(2, 6):
        trainer.global_steps = step
        batch = trainer._next_train_batch()
        assert sorted(batch["domain"]) == sorted(plain._next_train_batch()["domain"])
        later += [trainer._prompts[u][0] for u in batch["uid"]]
    assert len(later) == 16 and not set(later) & set(rows)
    assert trainer.driver.pending["dataflex/curriculum/target"] == 0.0
    resumed = intake_trainer(tmp_path, cur, batch_size=4)
    resumed.driver.load_state_dict(load_state(path))
    assert len(resumed.driver.strategy.history) == 4
