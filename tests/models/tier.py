"""The real-model tier: ``build(name)`` -> (model in eval mode, example inputs).

HF transformers models as users get them: built from config classes with small random configs,
default (SDPA) attention, model code untouched (HF_MODELS). In-project CNNs from examples/
(EXAMPLES): channel shuffle, squeeze-excite with swish or hardsigmoid, ConvNeXt blocks,
shifted-window attention.

Decoders set ``use_cache=False`` (a config option): with the cache on, forward returns a
``DynamicCache`` that torch.export cannot flatten. Norm layers get non-trivial scales and shifts
so outputs do not wash out.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
import transformers as hf
from torch import nn

from toolchain.modules import load_file

Built = tuple[nn.Module, tuple[torch.Tensor, ...]]
VOCAB, SEQ, WIDTH, HEADS, FFN, LAYERS = 1000, 16, 64, 4, 128, 2


def _prepared(model: nn.Module, *inputs: torch.Tensor) -> Built:
    """``model`` in eval mode with its norm layers' affine parameters re-drawn (seeded)."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for module in model.modules():
            if "norm" not in type(module).__name__.lower():
                continue
            for attr, low, high in (("weight", 0.5, 1.5), ("bias", -0.2, 0.2)):
                param = getattr(module, attr, None)
                if isinstance(param, torch.Tensor) and param.ndim == 1:
                    param.copy_(torch.rand(param.shape, generator=generator) * (high - low) + low)
    return model.eval(), inputs


def _ids() -> torch.Tensor:
    return torch.randint(0, VOCAB, (1, SEQ), generator=torch.Generator().manual_seed(1))


def _seeded(build: Callable[[], nn.Module]) -> nn.Module:
    torch.manual_seed(0)
    return build()


def bert() -> Built:
    config = hf.BertConfig(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=LAYERS,
                           num_attention_heads=HEADS, intermediate_size=FFN,
                           max_position_embeddings=64)
    return _prepared(_seeded(lambda: hf.BertModel(config)), _ids())


def distilbert() -> Built:
    config = hf.DistilBertConfig(vocab_size=VOCAB, dim=WIDTH, n_layers=LAYERS, n_heads=HEADS,
                                 hidden_dim=FFN, max_position_embeddings=64)
    return _prepared(_seeded(lambda: hf.DistilBertModel(config)), _ids())


def gpt2() -> Built:
    config = hf.GPT2Config(vocab_size=VOCAB, n_embd=WIDTH, n_layer=LAYERS, n_head=HEADS,
                           n_positions=64, bos_token_id=0, eos_token_id=0, use_cache=False)
    return _prepared(_seeded(lambda: hf.GPT2Model(config)), _ids())


def _decoder_config(cls: type) -> object:
    return cls(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=LAYERS,
               num_attention_heads=HEADS, num_key_value_heads=HEADS // 2, intermediate_size=FFN,
               max_position_embeddings=64, use_cache=False)


def llama() -> Built:
    config = _decoder_config(hf.LlamaConfig)
    return _prepared(_seeded(lambda: hf.LlamaModel(config)), _ids())


def qwen2() -> Built:
    config = _decoder_config(hf.Qwen2Config)
    return _prepared(_seeded(lambda: hf.Qwen2Model(config)), _ids())


def t5_encoder() -> Built:
    config = hf.T5Config(vocab_size=VOCAB, d_model=WIDTH, d_kv=WIDTH // HEADS, d_ff=FFN,
                         num_layers=LAYERS, num_heads=HEADS)
    return _prepared(_seeded(lambda: hf.T5EncoderModel(config)), _ids())


def vit() -> Built:
    config = hf.ViTConfig(image_size=32, patch_size=8, hidden_size=WIDTH,
                          num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                          intermediate_size=FFN)
    image = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    return _prepared(_seeded(lambda: hf.ViTModel(config)), image)


def whisper_encoder() -> Built:
    config = hf.WhisperConfig(vocab_size=VOCAB, d_model=WIDTH, encoder_layers=LAYERS,
                              encoder_attention_heads=HEADS, encoder_ffn_dim=FFN,
                              num_mel_bins=16, max_source_positions=50, pad_token_id=0,
                              decoder_start_token_id=0, bos_token_id=0, eos_token_id=0)
    features = torch.randn(1, 16, 100, generator=torch.Generator().manual_seed(1))
    encoder = hf.models.whisper.modeling_whisper.WhisperEncoder
    return _prepared(_seeded(lambda: encoder(config)), features)


def wav2vec2() -> Built:
    config = hf.Wav2Vec2Config(vocab_size=32, hidden_size=WIDTH, num_hidden_layers=LAYERS,
                               num_attention_heads=HEADS, intermediate_size=FFN,
                               conv_dim=(32, 32, 32), conv_stride=(5, 2, 2),
                               conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
                               num_conv_pos_embedding_groups=4)
    audio = torch.randn(1, 1600, generator=torch.Generator().manual_seed(1))
    return _prepared(_seeded(lambda: hf.Wav2Vec2Model(config)), audio)


HF_MODELS: dict[str, Callable[[], Built]] = {
    "bert": bert, "distilbert": distilbert, "gpt2": gpt2, "llama": llama, "qwen2": qwen2,
    "t5_encoder": t5_encoder, "vit": vit, "whisper_encoder": whisper_encoder,
    "wav2vec2": wav2vec2,
}

EXAMPLES = ("shufflenet_v2", "efficientnet_b0", "mobilenet_v3_large", "mnasnet", "convnext",
            "swin")
TIER = (*HF_MODELS, *EXAMPLES)
EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"


def build(name: str) -> Built:
    """The tier model ``name`` and its example inputs."""
    if name in HF_MODELS:
        return HF_MODELS[name]()
    module = load_file(EXAMPLES_DIR / f"{name}.py")
    return module.Model().eval(), tuple(module.example_inputs())
