"""The TRL host's ``dataflex`` block and its checks against TRL settings; needs no TRL (the
settings are read by attribute, so a namespace stands in for ``GRPOConfig``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.hosts.common.config import HostConfig, placeholder_domains
from dataflex_rl.hosts.common.driver import Driver
from dataflex_rl.hosts.trl.config import check, config_table, host_settings, parse_block


def trl_args(**kw):
    """TRL 1.16's defaults for the settings the checks read."""
    base = {
        "loss_type": "dapo",
        "scale_rewards": "group",
        "multi_objective_aggregation": "sum_then_normalize",
        "steps_per_generation": 2,
        "gradient_accumulation_steps": 2,
    }
    return SimpleNamespace(**{**base, **kw})


def test_block_from_a_mapping_none_or_a_yaml_file(tmp_path):
    assert parse_block(None).strategy == "baseline"
    assert parse_block({"strategy": "difffilter", "seed": 3}).seed == 3
    block = tmp_path / "dataflex.yaml"
    block.write_text("strategy: maxvar\ndomain_key: topic\n")
    assert parse_block(str(block)).domain_key == "topic"
    nested = tmp_path / "nested.yaml"  # a file shared with a verl config: {dataflex: block}
    nested.write_text("dataflex:\n  strategy: topk\n")
    assert parse_block(nested).strategy == "topk"
    parsed = parse_block({"strategy": "topk"})
    assert isinstance(parsed, HostConfig) and parse_block(parsed) is parsed


def test_block_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"dataflex\.strategi.*Did you mean 'strategy'"):
        parse_block({"strategi": "difffilter"})
    with pytest.raises(ConfigError, match=r"dataflex\.candidate_factor: must be >= 1"):
        parse_block({"candidate_factor": 0.5})
    with pytest.raises(ConfigError, match="'nope.yaml' is not a file"):
        parse_block("nope.yaml")
    with pytest.raises(ConfigError, match="must be a mapping or the path of a YAML file, got int"):
        parse_block(3)


def test_yaml_that_is_not_a_mapping(tmp_path):
    f = tmp_path / "list.yaml"
    f.write_text("- strategy\n")
    with pytest.raises(ConfigError, match="must hold a mapping, got list"):
        parse_block(f)


def build(block, args, tmp_path=".") -> Driver:
    """The driver the trainer builds (no intake, no decision log)."""
    return Driver.for_dataset(block, check(block, args), host_settings(args), None, tmp_path)


def test_strategy_built_for_grpo_advantages():
    s = build(parse_block({"strategy": "difffilter"}), trl_args()).strategy
    assert s.advantage_estimator == "grpo" and s.norm_adv_by_std
    s = build(parse_block({"strategy": "difffilter"}), trl_args(scale_rewards="none")).strategy
    assert not s.norm_adv_by_std  # Dr. GRPO: recomputed advantages are not divided by a std
    assert s.adv_eps == 1e-4  # TRL's constant (verl's and the engine's is 1e-6)


def test_unknown_strategy_name_is_the_engines_error():
    with pytest.raises(ConfigError, match="Did you mean 'difffilter'"):
        check(parse_block({"strategy": "difffilterr"}), trl_args())


def test_group_strategy_refused_under_normalize_then_sum():
    args = trl_args(multi_objective_aggregation="normalize_then_sum")
    with pytest.raises(
        ConfigError,
        match=r"multi_objective_aggregation: 'normalize_then_sum'.*'difffilter' needs groups "
        r"\(select: SolveRate\)",
    ):
        check(parse_block({"strategy": "difffilter"}), args)
    # a response-level strategy does not need groups
    assert check(parse_block({"strategy": "topk"}), args).select is not None


def test_recompute_advantages_needs_group_normalized_advantages():
    block = parse_block(
        {"strategy": {"select": {"preset": "difffilter", "recompute_advantages": True}}}
    )
    check(block, trl_args())
    with pytest.raises(ConfigError, match=r"select\.recompute_advantages.*scale_rewards='batch'"):
        check(block, trl_args(scale_rewards="batch"))


def test_unknown_loss_type_is_refused_listing_the_known_ones():
    with pytest.raises(ConfigError, match=r"loss_type: 'foo'.*bnpo, cispo, dapo"):
        check(parse_block(None), trl_args(loss_type="foo"))


def test_proportions_only_for_prerollout_without_mix():
    block = parse_block({"strategy": "difffilter", "proportions": [0.5, 0.5]})
    with pytest.raises(ConfigError, match="dataflex.proportions: only used"):
        check(block, trl_args())


def test_mixer_checked_early_with_placeholder_domains():
    block = parse_block({"strategy": {"mix": {"actuator": "static", "prior": [0.5, 0.5]}}})
    spec = check(block, trl_args())
    assert placeholder_domains(block, spec) == ("_domain0", "_domain1")
    floor = {"name": "static", "floor": 0.6}
    bad = parse_block({"strategy": {"mix": {"actuator": floor, "prior": [1.0, 0.0]}}})
    with pytest.raises(ConfigError, match="floor: 0.6 \\* 2 domains > 1"):
        check(bad, trl_args())  # the placeholders are the prior's two domains


def test_config_table_lists_every_key():
    table = config_table()
    for key in ("strategy", "domain_key", "seed", "decision_log.enabled"):
        assert f"| `{key}` |" in table
    assert "poll_interval" not in table  # verl's own key


def test_generation_batch_spanning_optimizer_steps_is_announced(caplog):
    block = parse_block({"strategy": "maxvar"})
    with caplog.at_level("WARNING", logger="dataflex_rl.hosts.trl"):
        check(block, trl_args(steps_per_generation=4))
    assert "steps_per_generation (4) != gradient_accumulation_steps (2)" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="dataflex_rl.hosts.trl"):
        check(parse_block({"strategy": "static"}), trl_args(steps_per_generation=4))
    assert caplog.text == ""  # a mixer does not touch the loss


def test_native_is_an_unknown_key():
    with pytest.raises(ConfigError, match=r"^dataflex\.native: unknown key\. Valid keys: strategy"):
        parse_block({"strategy": "ar", "native": False})
