"""The actor's weights as an inference engine loads them: Hugging Face names, LoRA merged, in bounded groups.

A step-3 actor is a DeepSpeed engine around a transformers model, possibly wrapped by peft (``--actor_lora_dim``)
and possibly sharded (ZeRO-3). An inference engine wants the plain model's checkpoint: the names of
``model.state_dict()`` of the transformers class (``model.layers.0.self_attn.q_proj.weight``; tied embeddings
once, under the embedding's name), each LoRA layer merged, W + (α/r)·B·A, computed without touching the
trained weights (merging in place and unmerging after would change them by float rounding). Under ZeRO-3 the
parameters are gathered a group of modules at a time, each group bounded by ``max_bytes`` (a module larger
than the bound is its own group), and the group's tensors are valid only until the consumer asks for the next
group (TRL and OpenRLHF sync per gathered parameter in the same way).
"""
from __future__ import annotations

import contextlib
from typing import Iterator, List, Tuple

import deepspeed
import torch

from dschat.training.memory_plan import SYNC_GROUP_BYTES

PEFT_PREFIX = "base_model.model."
"""What peft puts before the wrapped model's own parameter names."""


def hf_name(name: str) -> str:
    """The transformers checkpoint name of a (possibly peft-wrapped) parameter name."""
    if name.startswith(PEFT_PREFIX):
        name = name[len(PEFT_PREFIX):]
    return name.replace(".base_layer.", ".")


def _lora_layer_types() -> tuple:
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:  # peft absent: no LoRA to merge
        return ()
    return (LoraLayer,)


def weight_units(model: torch.nn.Module) -> List[Tuple[str, torch.nn.Module]]:
    """``(name, module)`` per unit of export: each LoRA layer whole (its base weights and adapters merge into
    one tensor), every other module with the parameters it holds directly; in ``named_modules`` order."""
    lora_types = _lora_layer_types()
    units, inside_lora = [], None
    for name, module in model.named_modules():
        if inside_lora is not None and name.startswith(inside_lora):
            continue
        inside_lora = None
        if lora_types and isinstance(module, lora_types):
            units.append((name, module))
            inside_lora = name + "."
        elif any(True for _ in module.parameters(recurse=False)):
            units.append((name, module))
    return units


def unit_tensors(name: str, module: torch.nn.Module, seen: set) -> List[Tuple[str, torch.Tensor]]:
    """The checkpoint tensors of one unit (its parameters gathered); parameters already exported (tied weights)
    are skipped via ``seen`` (ids)."""
    prefix = f"{name}." if name else ""
    lora_types = _lora_layer_types()
    if lora_types and isinstance(module, lora_types):
        base = module.get_base_layer()
        out = []
        for param_name, param in base.named_parameters(recurse=False):
            if id(param) in seen:
                continue
            seen.add(id(param))
            tensor = param.data
            if param_name == "weight":
                for adapter in module.active_adapters:
                    if adapter in module.lora_A:
                        tensor = tensor + module.get_delta_weight(adapter).to(tensor.dtype)
            out.append((hf_name(prefix + param_name), tensor))
        return out
    out = []
    for param_name, param in module.named_parameters(recurse=False):
        if id(param) in seen:
            continue
        seen.add(id(param))
        out.append((hf_name(prefix + param_name), param.data))
    return out


def _unit_bytes(module: torch.nn.Module) -> int:
    return sum(getattr(p, "ds_numel", p.numel()) * p.element_size() for p in module.parameters())


def exported_weights(engine, max_bytes: int = SYNC_GROUP_BYTES) -> Iterator[List[Tuple[str, torch.Tensor]]]:
    """Groups of ``(checkpoint name, tensor)`` of the DeepSpeed ``engine``'s module (module docstring). Without
    ZeRO-3 one group holds every tensor (views of the live parameters, no copy except LoRA's merged weights).
    Under ZeRO-3 every process must consume the groups in step (each gather is a collective)."""
    model = engine.module
    units = weight_units(model)
    zero3 = engine.zero_optimization_stage() == 3
    if not zero3:
        seen: set = set()
        yield [pair for name, module in units for pair in unit_tensors(name, module, seen)]
        return
    seen = set()
    group: list = []
    size = 0
    for unit in units + [None]:
        if unit is not None and (not group or size + _unit_bytes(unit[1]) <= max_bytes):
            group.append(unit)
            size += _unit_bytes(unit[1])
            continue
        params = [p for _, module in group for p in module.parameters()]
        with deepspeed.zero.GatheredParameters(params, modifier_rank=None) if params else contextlib.nullcontext():
            yield [pair for name, module in group for pair in unit_tensors(name, module, seen)]
        if unit is not None:
            group, size = [unit], _unit_bytes(unit[1])
