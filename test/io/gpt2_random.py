# SPDX-License-Identifier: MIT
"""A random GPT2LMHeadModel for the tests against transformers (check_gpt2_hf.py,
test/examples/check_gpt2_eval.py): double, no dropout, GPT-2's GeLU, its biases
and layer norms moved off their initial zeros and ones so that every parameter
matters, in eval mode."""
import torch
from transformers import GPT2Config, GPT2LMHeadModel


def random_gpt2(seed, layers, heads, width, positions, vocab):
    torch.manual_seed(seed)
    config = GPT2Config(n_layer=layers, n_head=heads, n_embd=width, n_positions=positions, vocab_size=vocab,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, activation_function="gelu_new")
    model = GPT2LMHeadModel(config).double()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln_" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    model.eval()
    return model
