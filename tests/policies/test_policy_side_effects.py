"""Building or loading a policy leaves the caller's process as it was."""

import torch

from dtoc_rl.policies.learned import LearnedPolicy
from dtoc_rl.policies.learned_config import LearnedPolicyConfig
from dtoc_rl.policies.registry import make_policy


def _tiny(seed=0):
    return LearnedPolicyConfig(d_model=16, n_heads=2, n_layers=1, seed=seed)


def test_loading_a_policy_keeps_torch_threads_and_rng(tmp_path):
    ckpt = LearnedPolicy(_tiny(seed=7)).save(tmp_path / "ckpt")
    before_threads = torch.get_num_threads()
    want = 2 if before_threads != 2 else 3  # differs from the config's threads (1)
    torch.set_num_threads(want)
    try:
        torch.manual_seed(1234)
        state = torch.get_rng_state()
        make_policy(str(ckpt))
        LearnedPolicy.load(ckpt)
        LearnedPolicy(_tiny(seed=3))
        assert torch.get_num_threads() == want
        assert torch.equal(torch.get_rng_state(), state)
    finally:
        torch.set_num_threads(before_threads)


def test_initial_weights_still_follow_the_config_seed():
    a, b, c = LearnedPolicy(_tiny(0)), LearnedPolicy(_tiny(0)), LearnedPolicy(_tiny(1))
    sa, sb, sc = a.net.state_dict(), b.net.state_dict(), c.net.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


def test_evaluate_runs_on_its_threads_and_restores_the_callers():
    from dtoc_rl.policies.baselines import NoManagement
    from dtoc_rl.policies.evaluate import evaluate

    class Spy(NoManagement):
        def __init__(self):
            super().__init__()
            self.seen = set()

        def act(self, obs, info=None):
            self.seen.add(torch.get_num_threads())
            return super().act(obs, info)

    before = torch.get_num_threads()
    want = 2 if before != 2 else 3
    torch.set_num_threads(want)
    try:
        spy = Spy()
        evaluate(None, [spy], source="mini-swe-agent", progress=False)
        assert spy.seen == {1} and torch.get_num_threads() == want
        spy.seen = set()
        evaluate(None, [spy], source="mini-swe-agent", progress=False, threads=None)
        assert spy.seen == {want}
    finally:
        torch.set_num_threads(before)


def test_a_decision_runs_on_the_policys_threads_and_restores_the_callers():
    from tests.policies.test_learned_batching import _obs

    pol = LearnedPolicy(_tiny())
    seen = []
    forward = pol.net.forward

    def spy(*a, **k):
        seen.append(torch.get_num_threads())
        return forward(*a, **k)

    pol.net.forward = spy
    obs = _obs([2.0, 3.0], [1, 0], step=4, active_k=5.0)
    before = torch.get_num_threads()
    want = 2 if before != 2 else 3  # the caller's own count, not the policy's (1)
    torch.set_num_threads(want)
    try:
        pol.probs(obs)
        assert seen == [1] and torch.get_num_threads() == want
        pol.threads = 2  # `dtoc-rl serve --threads 2`
        pol.probs(obs)
        assert seen == [1, 2] and torch.get_num_threads() == want
        # a batch (training, evaluation) runs on what its caller chose
        pol.probs({k: v[None] for k, v in obs.items()})
        assert seen == [1, 2, want]
        pol.threads = None  # None: the caller's count for single decisions too
        pol.probs(obs)
        assert seen == [1, 2, want, want]
        # a setting of the deciding process, not of the model: a loaded checkpoint decides on one
        assert LearnedPolicy(_tiny(seed=1)).threads == 1
    finally:
        torch.set_num_threads(before)


def test_serve_threads_apply_to_the_policy_and_its_fallback(tmp_path, monkeypatch):
    import dtoc_rl.serve.service as service_module
    from dtoc_rl.cli import main

    ckpt = str(LearnedPolicy(_tiny()).save(tmp_path / "ckpt"))
    built = []

    def no_server(service, *a, **k):  # stop before listening: the service is what is checked
        built.append(service)
        raise OSError(98, "not listening in this test")

    monkeypatch.setattr(service_module, "make_server", no_server)
    before = torch.get_num_threads()
    try:
        code = main(["serve", "--policy", "last_n:n=5", "--fallback", ckpt, "--threads", "3"])
    finally:
        torch.set_num_threads(before)
    assert code != 0 and len(built) == 1
    assert built[0].fallback.threads == 3 and built[0].policy.name != "learned"
