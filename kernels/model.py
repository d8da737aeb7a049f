"""A tiny self-speculative decoder whose projections go through the dispatched tiny GEMM.

Fixed-seed random weights, greedy decoding. Each layer, in the shape of the motivating model's decode path:

    n  = rmsnorm(h)                                  fixed-order row sum (batch invariant)
    a  = tiny_gemm(n, W_gate)       144 x D          KDA gate: 128 write channels + 16 per-head decays
    r  = tiny_gemm(n, W_router)     896 x D          MoE router; top-k experts by a stable sort
    s_t = alpha_t * s_{t-1} + (1 - alpha_t) * (a_t[:128] + sum_j w_j code[e_j])    per-layer recurrent state
    u  = tiny_gemm(s, W_up)         1536 x 128       KDA output up-projection
    h  = decay * h + (1 - decay) * fold(gain * expand(u))

``fold`` is a triangle wave (slope +-1, period 4) and ``expand`` a fixed gather with random signs from 1536
to D features: a chaotic map, so a 1-ulp difference in one projection output grows over the layers, and the
discrete top-k router choice turns it into a different expert. Every op is an IEEE basic operation (no
transcendental, whose vector and scalar code paths may round differently) or an exact selection, so the
whole forward pass is batch invariant exactly when the tiny GEMM dispatch is.

The draft proposes k tokens one at a time (m = 1); the verify pass scores [last, d1..dk] in one batch
(m = k + 1) and accepts the longest agreeing prefix plus one token. With batch-invariant dispatch every
draft is accepted and the mean accept length is exactly k + 1.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch

from . import native
from .fixed_order import row_sum
from .tiny_gemm import tiny_gemm

_RMS_EPS = 1e-6


@dataclass(frozen=True)
class DecoderConfig:
    """Sizes and dynamics of the decoder; everything that changes the measured accept length."""

    name: str
    hidden: int
    layers: int
    vocab: int
    experts: int = 896
    gate: int = 144
    state: int = 128
    up: int = 1536
    router_topk: int = 2
    gain: float = 2.0
    residual_decay: float = 0.25
    prompts: int = 8
    rounds: int = 8
    prompt_len: int = 4
    seed: int = 0

    @property
    def heads(self) -> int:
        return self.gate - self.state

    def gemm_shapes(self) -> dict[str, tuple[int, int]]:
        """(N, K) of each projection, keyed by the op name that the dispatch trace records."""
        return {
            "kda_gate": (self.gate, self.hidden),
            "moe_router": (self.experts, self.hidden),
            "kda_out": (self.up, self.state),
            "lm_head": (self.vocab, self.hidden),
        }

    def to_json(self) -> dict[str, object]:
        return asdict(self)


# The CPU configuration keeps the structure and the N of every projection but a hidden size of 1024, so a
# measurement takes seconds on two cores; CUDA runs the motivating model's sizes (hidden 7168).
CPU_CONFIG = DecoderConfig(name="cpu", hidden=1024, layers=6, vocab=512, gain=2.5, prompts=12, rounds=4)
CUDA_CONFIG = DecoderConfig(name="cuda", hidden=7168, layers=6, vocab=2048, gain=2.0, prompts=16, rounds=8)
CONFIGS = {c.name: c for c in (CPU_CONFIG, CUDA_CONFIG)}


@dataclass(frozen=True)
class DecoderWeights:
    embedding: torch.Tensor  # (V, D) fp32
    gate: list[torch.Tensor]  # per layer (144, D) bf16
    router: list[torch.Tensor]  # per layer (896, D) bf16
    codes: list[torch.Tensor]  # per layer (896, 128) fp32: what each expert writes into the state
    up: list[torch.Tensor]  # per layer (1536, 128) bf16
    expand_index: list[torch.Tensor]  # per layer (D,) int64 into the 1536 up-projection outputs
    expand_sign: list[torch.Tensor]  # per layer (D,) fp32, +-1
    lm_head: torch.Tensor  # (V, D) bf16
    rank_weight: list[float]  # weight of the j-th chosen expert

    @classmethod
    def random(cls, config: DecoderConfig, device: torch.device) -> DecoderWeights:
        """Weights from config.seed; drawn on the CPU so every device runs the same model."""
        gen = torch.Generator().manual_seed(config.seed)

        def normal(*shape: int, scale: float = 1.0) -> torch.Tensor:
            return torch.randn(*shape, generator=gen) * scale

        def bf16(*shape: int, fan_in: int) -> torch.Tensor:
            return normal(*shape, scale=fan_in**-0.5).to(torch.bfloat16).to(device)

        d, layers = config.hidden, range(config.layers)
        return cls(
            embedding=normal(config.vocab, d).to(device),
            gate=[bf16(config.gate, d, fan_in=d) for _ in layers],
            router=[bf16(config.experts, d, fan_in=d) for _ in layers],
            codes=[normal(config.experts, config.state).to(device) for _ in layers],
            up=[bf16(config.up, config.state, fan_in=config.state) for _ in layers],
            expand_index=[torch.randint(0, config.up, (d,), generator=gen).to(device) for _ in layers],
            expand_sign=[(torch.randint(0, 2, (d,), generator=gen) * 2 - 1).float().to(device) for _ in layers],
            lm_head=bf16(config.vocab, d, fan_in=d),
            rank_weight=[0.5**j for j in range(config.router_topk)],
        )


def rms_norm(h: torch.Tensor) -> torch.Tensor:
    """RMSNorm without a gain, bf16 out; the mean of squares in a fixed order."""
    mean_sq = row_sum(h * h) / h.shape[1]
    return (h * (1.0 / torch.sqrt(mean_sq + _RMS_EPS))[:, None]).to(torch.bfloat16)


def softsign(x: torch.Tensor) -> torch.Tensor:
    return x / (1.0 + x.abs())


def fold(x: torch.Tensor) -> torch.Tensor:
    """Triangle wave of period 4 and slope +-1 in [-1, 1]: stretches and folds, with basic IEEE ops only."""
    quarter = x * 0.25
    frac = quarter - torch.floor(quarter)
    return (frac * 4.0 - 2.0).abs() - 1.0


class Decoder:
    """Greedy decoder over DecoderWeights; ``forward`` scores m tokens in one batch."""

    def __init__(self, config: DecoderConfig, device: torch.device) -> None:
        self.config = config
        self.device = device
        self.weights = DecoderWeights.random(config, device)

    def initial_state(self) -> torch.Tensor:
        return torch.zeros(self.config.layers, self.config.state, device=self.device)

    def forward(self, tokens: list[int], state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits (m, V) after each token and the recurrent state (m, layers, 128) after each token."""
        cfg, w = self.config, self.weights
        m = len(tokens)
        h = w.embedding[torch.tensor(tokens, device=self.device)]
        states = []
        for layer in range(cfg.layers):
            n = rms_norm(h)
            a = tiny_gemm(n, w.gate[layer], op="kda_gate").float()
            r = tiny_gemm(n, w.router[layer], op="moe_router")
            experts = torch.sort(r, dim=-1, descending=True, stable=True).indices[:, : cfg.router_topk]
            chosen = w.codes[layer][experts]  # (m, topk, 128)
            write = a[:, : cfg.state]
            for j, weight in enumerate(w.rank_weight):
                write = write + chosen[:, j] * weight
            decay = (0.5 + 0.5 * softsign(a[:, cfg.state :])).repeat_interleave(cfg.state // cfg.heads, dim=1)
            keep = 1.0 - decay
            s = state[layer]
            per_token = []
            for t in range(m):
                s = decay[t] * s + keep[t] * write[t]
                per_token.append(s)
            s_all = torch.stack(per_token)
            states.append(s_all)
            u = tiny_gemm(s_all.to(torch.bfloat16), w.up[layer], op="kda_out").float()
            z = u[:, w.expand_index[layer]] * w.expand_sign[layer]
            h = cfg.residual_decay * h + (1.0 - cfg.residual_decay) * fold(cfg.gain * z)
        logits = tiny_gemm(rms_norm(h), w.lm_head, op="lm_head").float()
        return logits, torch.stack(states, dim=1)


@dataclass(frozen=True)
class AcceptResult:
    accept_length: float
    k: int
    rounds: int
    histogram: list[int]  # histogram[a] = rounds that accepted a tokens (1..k+1)
    tokens: int
    wall_s: float


def prompts(config: DecoderConfig) -> list[list[int]]:
    """The fixed prompt set: config.prompts random prompts of config.prompt_len tokens."""
    gen = torch.Generator().manual_seed(config.seed + 1)
    return [torch.randint(0, config.vocab, (config.prompt_len,), generator=gen).tolist() for _ in range(config.prompts)]


def measure_accept_length(decoder: Decoder, k: int) -> AcceptResult:
    """Mean accept length of self-speculative greedy decoding over the fixed prompts."""
    if k < 1:
        raise ValueError("k must be at least 1")
    cfg = decoder.config
    start = time.perf_counter()
    histogram = [0] * (k + 2)
    tokens = 0
    with torch.inference_mode():
        for prompt in prompts(cfg):
            _, prefill = decoder.forward(prompt[:-1], decoder.initial_state())
            state, last = prefill[-1], prompt[-1]
            for _ in range(cfg.rounds):
                drafts = _draft(decoder, last, state, k)
                logits, verified = decoder.forward([last, *drafts], state)
                predicted = torch.argmax(logits, dim=-1).tolist()
                accepted = native.accepted_prefix(drafts, predicted, k)
                histogram[accepted + 1] += 1
                tokens += accepted + 1
                state, last = verified[accepted], predicted[accepted]
    rounds = cfg.prompts * cfg.rounds
    return AcceptResult(
        accept_length=tokens / rounds,
        k=k,
        rounds=rounds,
        histogram=histogram[1:],
        tokens=tokens,
        wall_s=time.perf_counter() - start,
    )


def _draft(decoder: Decoder, last: int, state: torch.Tensor, k: int) -> list[int]:
    drafts: list[int] = []
    token = last
    for _ in range(k):
        logits, after = decoder.forward([token], state)
        state = after[0]
        token = int(torch.argmax(logits[0]))
        drafts.append(token)
    return drafts
