"""``python -m dataflex_rl.hosts.verl.check``: does verl accept each arm's run, before any run?

For each arm of the payload (``{"where", "arms": [{"label", "settings", "strategy"}]}`` on
stdin) it composes a seed-0 run's config with Hydra and builds the ``dataflex`` trainer from
it, starting nothing (`hosts.host.check_main` reports a refusal).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import yaml

from dataflex_rl.core.registry import ConfigError
from dataflex_rl.hosts.host import check_main
from dataflex_rl.hosts.verl.settings import parse_settings, run_env, run_overrides


def compose_run(settings: dict, strategy: dict, work: Path):
    """verl's composed config of a seed-0 run of these settings and strategy (in ``work``)."""
    from hydra import compose, initialize_config_dir

    s = parse_settings(settings)
    work.mkdir(parents=True, exist_ok=True)
    strategy_file = work / "dataflex_strategy.yaml"
    strategy_file.write_text(yaml.safe_dump(strategy, sort_keys=False))
    env = run_env(s, os.getcwd(), os.environ.get("PYTHONPATH", ""))
    overrides = run_overrides(
        s,
        seed=0,
        out_dir=work,
        strategy_file=strategy_file,
        name="check",
        resume=False,
        resume_step=0,
        env=env,
    )
    if s.config:
        config_dir, name = str(Path(s.config).resolve().parent), Path(s.config).stem
    else:
        import verl

        config_dir, name = str(Path(verl.__file__).parent / "trainer" / "config"), "ppo_trainer"
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name=name, overrides=overrides)


def check_arm(settings: dict, strategy: dict, work: Path) -> None:
    """Compose the arm's run and build the dataflex trainer from it; raises what verl or the
    plugin raises."""
    from dataflex_rl.hosts.verl.trainer import DataflexTrainer

    DataflexTrainer(compose_run(settings, strategy, work))


def _message(e: BaseException) -> str:
    lines = [x.strip() for x in str(e).splitlines() if x.strip()]
    return f"{type(e).__name__}: {' '.join(lines[:3])}" if lines else type(e).__name__


def check_arms(payload: dict) -> None:
    """Every arm of ``payload`` composed and given to the dataflex trainer; the first one
    refused raises a `ConfigError` with what verl or the plugin said."""
    with tempfile.TemporaryDirectory() as tmp:
        for i, arm in enumerate(payload["arms"]):
            try:
                check_arm(arm["settings"], arm["strategy"], Path(tmp) / str(i))
            except Exception as e:  # noqa: BLE001  (reported on one line, named by the arm)
                raise ConfigError(
                    f"{payload['where']}: verl refuses a run of strategy {arm['label']}: "
                    f"{_message(e)}"
                ) from e


if __name__ == "__main__":
    sys.exit(check_main(check_arms))
