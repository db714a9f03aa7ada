"""The prompt-group batches the pre-rollout tests build by hand."""

from dataflex_rl.core.batch import from_lists


def group_batch(groups, step=0, lengths=None):
    """``groups``: {prompt_key: [rewards]} -> one group per prompt, in order (``lengths``:
    optional per-response token counts)."""
    rewards, gids, keys = [], [], []
    for g, (key, rs) in enumerate(groups.items()):
        rewards += rs
        gids += [g] * len(rs)
        keys += [key] * len(rs)
    return from_lists(rewards, gids, lengths, prompt_keys=tuple(keys), step=step)
