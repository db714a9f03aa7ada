"""`core.native`: the compiled token kernels against plain-loop oracles, and their use by
`RolloutBatch` / `Strategy` (``ar``): the same decisions as the torch path, odd rows exact,
a clear error or a fallback when they cannot be built."""

import math
import shutil
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflex_rl import Strategy
from dataflex_rl.core.batch import BatchError, RolloutBatch
from dataflex_rl.core.native import NativeUnavailable, build, load_token_kernels
from dataflex_rl.core.registry import ConfigError
from dataflex_rl.core.rowops import TokenBlocks
from dataflex_rl.core.strategy import StrategyWarning


def _have_kernels() -> bool:
    try:
        load_token_kernels()
    except NativeUnavailable:
        return False
    return True


#: tests that need the kernels take the `kernels` fixture, which skips them where they cannot
#: be built; the fallback tests run everywhere
HAVE_KERNELS = _have_kernels()
ULP = 2.0**-24  # float32 relative rounding unit
LOWEST = -87.0  # the kernels' plain range is [LOWEST, 0]


@pytest.fixture(scope="module")
def built():
    """Skips the test where the kernels cannot be built."""
    if not HAVE_KERNELS:
        pytest.skip("no C compiler: the kernels cannot be built here (torch fallback)")


@pytest.fixture(scope="module", params=["machine", "baseline"])
def kernels(request, tmp_path_factory):
    """The kernels as built for this machine (AVX2 streaming stores on x86-64) and with the
    compiler's baseline flags (the portable code path)."""
    if not HAVE_KERNELS:
        pytest.skip("no C compiler: the kernels cannot be built here (torch fallback)")
    if request.param == "machine":
        return load_token_kernels()
    return load_token_kernels(tmp_path_factory.mktemp("kernels"), arch=())


# ---------------------------------------------------------------------------- oracles
def oracle_sums(x, lengths):
    """Per row: (float64 sum of exp over the first lengths[r] values, odd: one of them is
    outside [LOWEST, 0] or NaN), a plain loop."""
    sums, odd = [], []
    for r in range(x.shape[0]):
        vals = [float(v) for v in x[r, : int(lengths[r])]]
        odd.append(any(not (LOWEST <= v <= 0.0) for v in vals))  # NaN fails both
        sums.append(sum(math.exp(v) for v in vals if LOWEST <= v <= 0.0))
    return torch.tensor(sums, dtype=torch.float64), torch.tensor(odd, dtype=torch.bool)


def oracle_lengths(mask):
    """[B] lengths when every row is ones then zeros, else None: a plain loop."""
    out = []
    for row in mask.tolist():
        n = row.index(False) if False in row else len(row)
        if any(row[n:]):
            return None
        out.append(n)
    return torch.tensor(out, dtype=torch.int64)


def log_probs(B, T, seed, odd_rows=()):
    g = torch.Generator().manual_seed(seed)
    x = -torch.rand(B, T, generator=g) * torch.rand(B, 1, generator=g) * 12.0
    specials = [float("nan"), float("inf"), -float("inf"), 0.25, -90.0, -200.0]
    for i, r in enumerate(odd_rows):
        x[r, min(i, T - 1)] = specials[i % len(specials)]
    return x


# ---------------------------------------------------------------------------- kernels
def test_exp_is_within_two_ulp_on_the_plain_range(kernels):
    x = torch.cat([torch.linspace(LOWEST, 0.0, 1_000_001), -torch.rand(100_000) * 1e-6])
    ref = torch.exp(x.double())
    rel = ((kernels.exp(x).double() - ref).abs() / ref).max().item()
    assert rel <= 2 * ULP, rel
    assert kernels.exp(torch.zeros(3)).tolist() == [1.0, 1.0, 1.0]


@settings(max_examples=60, deadline=None)
@given(
    B=st.integers(0, 7),
    T=st.integers(0, 70),
    seed=st.integers(0, 10_000),
    n_odd=st.integers(0, 6),
)
def test_prob_row_sums_match_a_loop(kernels, B, T, seed, n_odd):
    g = torch.Generator().manual_seed(seed + 1)
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    x = log_probs(B, T, seed, odd_rows=range(min(n_odd, B)) if T else ())
    sums, odd = kernels.prob_row_sums(x, lengths)
    ref, ref_odd = oracle_sums(x, lengths)
    # a value outside the plain range is odd only where it is valid (t < length)
    assert torch.equal(odd, ref_odd)
    plain = ~ref_odd
    torch.testing.assert_close(sums[plain], ref[plain], rtol=4 * ULP, atol=0.0)


@settings(max_examples=40, deadline=None)
@given(B=st.integers(0, 6), T=st.integers(0, 1100), seed=st.integers(0, 10_000))
def test_row_sums_match_a_loop(kernels, B, T, seed):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    x = torch.randn(B, T, generator=g) * 3
    if B and T:
        x[0, int(lengths[0]) :] = float("nan")  # past the length: never read
    if B > 1 and int(lengths[1]):
        x[1, 0] = float("inf")
    got = kernels.row_sums(x, lengths)
    for r in range(B):
        vals = [float(v) for v in x[r, : int(lengths[r])]]
        if r == 1 and vals:
            assert got[r] == float("inf")
        else:  # float32 partial sums: within 1e-6 of the magnitude summed
            scale = max(1.0, math.fsum(abs(v) for v in vals))
            assert abs(float(got[r]) - math.fsum(vals)) <= 1e-6 * scale


@settings(max_examples=60, deadline=None)
@given(B=st.integers(0, 6), T=st.integers(0, 70), seed=st.integers(0, 10_000))
def test_affine_prob_matches_a_loop(kernels, B, T, seed):
    g = torch.Generator().manual_seed(seed + 2)
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    x = log_probs(B, T, seed)
    A, C = torch.rand(B, generator=g) * 3, torch.rand(B, generator=g)
    if B:
        A[0] = C[0] = 0.0  # an all-zero row: exactly 0, whatever x holds
        if T:
            x[0, 0] = float("nan")
    out = torch.full((B, T), 7.0)
    kernels.affine_prob(x, lengths, A, C, out)
    for r in range(B):
        n = int(lengths[r])
        assert torch.equal(out[r, n:], torch.zeros(T - n))
        ref = torch.tensor(
            [float(A[r]) * math.exp(float(v)) + float(C[r]) for v in x[r, :n]]
            if r or not T
            else [0.0] * n,
            dtype=torch.float64,
        )
        torch.testing.assert_close(out[r, :n].double(), ref, rtol=4 * ULP, atol=1e-7)


@settings(max_examples=80, deadline=None)
@given(
    B=st.integers(0, 6),
    T=st.integers(0, 40),
    seed=st.integers(0, 10_000),
    hole=st.booleans(),
)
def test_prefix_lengths_match_a_loop_and_the_block_summary(kernels, B, T, seed, hole):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None, :] < lengths[:, None]
    if hole and B and T:
        r, t = (
            int(torch.randint(0, B, (1,), generator=g)),
            int(torch.randint(0, T, (1,), generator=g)),
        )
        mask[r, t] = not bool(mask[r, t])
    ref = oracle_lengths(mask)
    got = kernels.prefix_lengths(mask)
    blocks = TokenBlocks(mask).prefix_lengths
    for n in (got, blocks):
        assert (n is None) == (ref is None)
        if ref is not None:
            assert torch.equal(n, ref)


def test_prefix_lengths_of_a_view_with_an_offset(kernels):
    mask = torch.arange(20)[None, :] < torch.tensor([3, 20, 0, 9, 17])[:, None]
    view = mask[1:]
    assert torch.equal(kernels.prefix_lengths(view), torch.tensor([20, 0, 9, 17]))
    holed = mask.clone()
    holed[3, 15] = True  # 9 ones, then a 1 at 15
    assert kernels.prefix_lengths(holed) is None
    assert TokenBlocks(holed).prefix_lengths is None


def test_bad_inputs_are_refused_with_the_reason(kernels):
    x = torch.zeros(2, 4)
    with pytest.raises(ValueError, match="lengths"):
        kernels.prob_row_sums(x, torch.tensor([1, 5]))
    with pytest.raises(ValueError, match="float32"):
        kernels.prob_row_sums(x.double(), torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="contiguous"):
        kernels.affine_prob(x.t(), torch.tensor([1, 2, 0, 0]), torch.ones(4), torch.ones(4), x.t())


# ---------------------------------------------------------------------------- build
def test_a_build_is_cached_and_shared(tmp_path, built):
    first = build(tmp_path)
    stamp = first.stat().st_mtime_ns
    assert build(tmp_path) == first and first.stat().st_mtime_ns == stamp
    assert not [p for p in first.parent.iterdir() if p.name.startswith(".build-")]


def test_a_cached_build_is_used_without_a_compiler(tmp_path, monkeypatch, built):
    first = build(tmp_path)
    monkeypatch.setenv("CC", "no-such-compiler-dfx")
    assert load_token_kernels(tmp_path).path == first


def test_a_cc_command_line_is_run_whole(tmp_path, monkeypatch, built):
    if shutil.which("env") is None:
        pytest.skip("no `env` program")
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    monkeypatch.setenv("CC", f"env {cc}")  # a wrapper and its compiler, as with ccache
    assert load_token_kernels(tmp_path).exp(torch.zeros(1)).item() == 1.0


def test_an_unusable_cache_falls_back_to_torch(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("DATAFLEX_RL_CACHE", str(blocker))
    with pytest.raises(NativeUnavailable, match="not-a-folder"):
        load_token_kernels()
    with pytest.warns(StrategyWarning, match="computed in torch"):
        s = Strategy("ar")
    ref = Strategy("ar", native=False).decide(ar_batch(seed=7))
    assert s.kernels is None
    assert torch.equal(s.decide(ar_batch(seed=7)).weights_per_token, ref.weights_per_token)


def test_a_strategy_unpickled_where_kernels_cannot_load_falls_back(tmp_path, monkeypatch, built):
    import pickle

    auto, required = pickle.dumps(Strategy("ar")), pickle.dumps(Strategy("ar", native=True))
    monkeypatch.setenv("DATAFLEX_RL_CACHE", str(tmp_path))  # no build there
    monkeypatch.setenv("CC", "no-such-compiler-dfx")
    with pytest.warns(StrategyWarning, match="no-such-compiler-dfx"):
        s = pickle.loads(auto)
    assert s.kernels is None
    ref = Strategy("ar", native=False).decide(ar_batch(seed=8))
    torch.testing.assert_close(s.decide(ar_batch(seed=8)).weights_per_token, ref.weights_per_token)
    with pytest.raises(ConfigError, match="native"):
        pickle.loads(required)


def test_no_compiler_is_reported_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setenv("DATAFLEX_RL_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", "no-such-compiler-dfx")
    with pytest.raises(NativeUnavailable, match="no-such-compiler-dfx"):
        load_token_kernels()
    with pytest.raises(ConfigError, match=r"ar: native: .*no-such-compiler-dfx"):
        Strategy("ar", native=True)
    with pytest.warns(StrategyWarning, match="computed in torch"):
        s = Strategy("ar")
    assert s.kernels is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Strategy("ar", native=False).kernels is None
        assert Strategy("softmax", native=True).kernels is None  # nothing to compile


def test_a_failing_compiler_names_itself(tmp_path, monkeypatch):
    if shutil.which("false") is None:
        pytest.skip("no `false` program")
    monkeypatch.setenv("CC", "false")
    with pytest.raises(NativeUnavailable, match="false failed"):
        build(tmp_path)
    assert not list((tmp_path / "kernels").iterdir())  # no half-written library left


def test_the_streaming_path_writes_what_the_plain_path_writes(kernels):
    """2^24 outputs take the streaming stores (with AVX); row blocks of the same tensor, below
    that size, the plain ones: the same bits either way."""
    B, T = 4096, 4096
    g = torch.Generator().manual_seed(11)
    x = -torch.rand(B, T, generator=g) * 5
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    lengths[:3] = torch.tensor([T, 0, 1])
    A, C = torch.rand(B, generator=g), torch.rand(B, generator=g)
    A[5] = C[5] = 0.0
    big = kernels.affine_prob(x, lengths, A, C, torch.full((B, T), 9.0))
    for i in range(0, B, 512):
        part = torch.full((512, T), 9.0)
        j = i + 512
        kernels.affine_prob(x[i:j].contiguous(), lengths[i:j], A[i:j], C[i:j], part)
        assert torch.equal(big[i:j], part)
    assert big[1].abs().sum() == 0 and big[5].abs().sum() == 0


def test_native_must_be_a_bool_or_none():
    with pytest.raises(ConfigError, match="native"):
        Strategy("ar", native="yes")


# ---------------------------------------------------------------------------- in a decision
def ar_batch(B=24, T=37, G=4, seed=0, odd=(), holes=False, lengths_given=True, per_response=True):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    lengths[1] = T
    mask = torch.arange(T)[None, :] < lengths[:, None]
    if holes:
        mask[1, 3] = False
    x = log_probs(B, T, seed)
    specials = {"nan": float("nan"), "pos": 0.5, "low": -95.0, "neginf": -float("inf")}
    for r, kind in odd:
        x[r, 0] = specials[kind]
    rewards = (torch.rand(B, generator=g) < 0.5).float()
    adv = torch.randn(B, generator=g)
    token_adv = adv[:, None] + 0.1 * torch.randn(B, T, generator=g)  # varies along the row
    if not per_response and B > 6 and T:
        token_adv[6, 0] = float("nan")  # a NaN advantage on a valid token: an invalid row
    return RolloutBatch(
        rewards=rewards,
        response_mask=mask,
        group_ids=torch.arange(B) // G,
        advantages=token_adv,
        old_log_probs=x,
        response_advantages=adv if per_response else None,
        response_lengths=mask.sum(1) if lengths_given else None,
    )


@pytest.mark.parametrize(
    "lengths_given,per_response", [(True, True), (False, True), (True, False), (False, False)]
)
@pytest.mark.parametrize("odd", [(), ((2, "nan"), (3, "pos"), (4, "low"), (5, "neginf"))])
def test_ar_decides_the_same_with_and_without_kernels(odd, lengths_given, per_response, built):
    """Per-response inputs, or token advantages (varying along rows, one NaN): the kernels
    then also give the advantage row sums and the lengths."""
    native, torch_only = Strategy("ar", native=True), Strategy("ar", native=False)
    assert native.kernels is not None

    def batch():
        return ar_batch(odd=odd, lengths_given=lengths_given, per_response=per_response)

    a, b = native.decide(batch()), torch_only.decide(batch())
    assert torch.equal(a.keep_mask, b.keep_mask)
    torch.testing.assert_close(a.weights_per_response, b.weights_per_response, rtol=1e-6, atol=0)
    wa, wb = a.weights_per_token, b.weights_per_token
    torch.testing.assert_close(wa, wb, rtol=1e-6, atol=0)
    assert torch.equal(wa == 0, wb == 0)  # the same tokens carry no weight
    out = torch.full_like(wa, float("nan"))
    native.decide(batch()).write_weights_per_token(out)
    assert torch.equal(out, wa)
    for k in ("dataflex/invalid_responses", "dataflex/kept_token_fraction"):
        assert a.metrics[k] == b.metrics[k]
    # rows with a NaN or an infinity are invalid on both paths (old log-probs: rows 2 and 5;
    # advantages: row 6); the other odd rows (3, 4) were redone exactly
    assert a.metrics["dataflex/invalid_responses"] == 2 * bool(odd) + (not per_response)


def test_kernels_apply_only_to_right_padded_cpu_float32_rows(built):
    native = Strategy("ar", native=True)
    plain = ar_batch().with_kernels(native.kernels)
    assert plain.token_kernels is native.kernels
    holed = ar_batch(holes=True, lengths_given=False).with_kernels(native.kernels)
    assert holed.token_kernels is None  # a hole: the torch path
    b = ar_batch(holes=True, lengths_given=False)
    d = native.decide(b.replace(old_log_probs=b.old_log_probs.double()))
    ref = Strategy("ar", native=False).decide(ar_batch(holes=True, lengths_given=False))
    torch.testing.assert_close(d.weights_per_token, ref.weights_per_token, rtol=1e-6, atol=0)


def test_lengths_that_disagree_with_the_mask_are_refused_on_the_kernel_path(built):
    b = ar_batch()
    wrong = b.response_lengths.clone()
    wrong[3] += 1 if wrong[3] < b.response_mask.shape[1] else -1
    bad = b.replace(response_lengths=wrong)
    with pytest.raises(BatchError, match="row 3"):
        Strategy("ar", native=True).decide(bad)


def test_a_strategy_with_kernels_pickles_and_decides_the_same(built):
    import copy
    import pickle

    s = Strategy("ar", native=True)
    for twin in (pickle.loads(pickle.dumps(s)), copy.deepcopy(s)):
        assert twin.kernels is not None
        a, b = s.decide(ar_batch(seed=3)), twin.decide(ar_batch(seed=3))
        assert torch.equal(a.weights_per_token, b.weights_per_token)


def test_a_decision_does_not_depend_on_what_the_host_read_before(built):
    s = Strategy("ar", native=True)
    fresh = s.decide(ar_batch(B=48, T=300, seed=5))
    touched = ar_batch(B=48, T=300, seed=5)
    assert touched.active_mask.any() and touched.token_prob_sums.sum() > 0  # torch pass, cached
    again = Strategy("ar", native=True).decide(touched)
    assert torch.equal(fresh.weights_per_response, again.weights_per_response)
    assert torch.equal(fresh.weights_per_token, again.weights_per_token)
