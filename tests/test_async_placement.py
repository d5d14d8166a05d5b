"""Where an asynchronous producer runs and how weights reach it (``--rollout_gpus``, ``--rollout_transport``;
dschat/rlhf/rollout/producer.py, transport.py).

What is pinned on CPU: the collective transport (the GPU protocol, gloo here) delivers the same weights as the
queue — a K = 1 run logs the same metrics by either; a producer that stops receiving mid-transfer, or dies,
ends the run in one line within ``--rollout_timeout``; which GPU holds each rank's producer; the
placement refusals (run and pre-flight alike), the launcher's split and the memory plan's producer GPUs. Not
measured here: NCCL between GPUs (no GPU on the machines the suite runs on)."""
from __future__ import annotations

import os
import time
from types import SimpleNamespace

import pytest
import torch

from conftest import TINY_PPO, read_metrics
from dschat.cli.ppo import main as ppo_main
from dschat.rlhf.rollout.producer import producer_devices, visible_devices
from dschat.rlhf.rollout.transport import CollectiveReceiver, CollectiveWeights
from dschat.stages.configs import ASYNC_ON_GPU, producer_placement_error
from dschat.training.faults import RunStopped

FLAGS = TINY_PPO + ["--termination", "fixed", "--ngram", "3", "--eval_steps", "0", "--max_steps", "3",
                    "--async_rollout", "1", "--rollout_is", "macro"]


def test_the_collective_transport_delivers_what_the_queue_does(tmp_path):
    """The same K = 1 run with weights broadcast in the trainer-producer group (gloo: the GPU path's protocol)
    and through the queue: every rollout, hence every logged metric, is the same — the weights each version
    samples with arrived whole, in order, before its rollouts."""
    for transport in ("queue", "collective"):
        ppo_main(FLAGS + ["--output_dir", str(tmp_path / transport), "--rollout_transport", transport])
    queue, collective = read_metrics(tmp_path / "queue"), read_metrics(tmp_path / "collective")
    assert sum("loss/policy" in row for row in queue) == 3 and collective == queue


def _receive_once_then_stall(port: int, seconds: float) -> None:
    receiver = CollectiveReceiver(port, "gloo", 30, 30, torch.device("cpu"))
    receiver.receive(("weights", [("w", (4,), torch.float32)]))
    time.sleep(seconds)  # alive, but receiving nothing more


def _start_receiver(context, transport, seconds):
    process = context.Process(target=_receive_once_then_stall, args=(transport.store.port, seconds), daemon=True)
    process.start()
    transport.connect()
    transport.send([[("w", torch.arange(4.0))]], 0)
    return process


@pytest.mark.parametrize("dies", [False, True], ids=["stalls", "dies"])
def test_a_transfer_the_producer_does_not_take_ends_in_one_line_within_the_timeout(dies):
    """A producer that stops receiving part-way (alive, or dead) never hangs the trainer: the broadcast gives up
    after ``--rollout_timeout`` seconds (here 3) with one line naming the tensor."""
    context = torch.multiprocessing.get_context("spawn")
    transport = CollectiveWeights(context.Queue(), "gloo", 3.0, 300.0, torch.device("cpu"))
    process = _start_receiver(context, transport, 0 if dies else 60)
    if dies:
        process.join(timeout=30)
    start = time.monotonic()
    with pytest.raises(RunStopped) as stopped:
        transport.send([[("next", torch.ones(4))]], 1)
    assert time.monotonic() - start < 3.0 + 2.0
    message = str(stopped.value)
    assert message.startswith("the weight transfer to the rollout producer (next) did not finish in 3 s "
                              "(--rollout_timeout)") and "\n" not in message and "[" not in message
    process.kill()


def test_each_rollout_gpu_holds_the_producers_of_consecutive_ranks():
    assert [producer_devices((4, 5, 6, 7), rank, 4) for rank in range(4)] == [(4,), (5,), (6,), (7,)]
    assert [producer_devices((6, 7), rank, 6) for rank in range(6)] == [(6,), (6,), (6,), (7,), (7,), (7,)]
    assert producer_devices((), 0, 1) == ()


def test_the_producer_is_started_seeing_only_its_gpus_and_the_trainer_keeps_its_own(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with visible_devices((6, 7)):
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "6,7"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    with visible_devices((3,)):
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "3"
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    with visible_devices(()):  # CPU: nothing changes
        assert "CUDA_VISIBLE_DEVICES" not in os.environ


@pytest.mark.parametrize("async_rollout, gpus, on_gpu, trainer, expected", [
    (0, (), True, "0", None),
    (1, (), False, None, None),
    (1, (), True, "0,1", f"--async_rollout 1: {ASYNC_ON_GPU}"),
    (1, (2, 3), False, None, "--rollout_gpus 2 3: no GPU here (a producer on CPU needs no --rollout_gpus)"),
    (1, (2, 3), True, None, "--rollout_gpus 2 3: the trainer's processes see every GPU; launch them on the others "
                            "(the launcher's ROLLOUT_GPUS, or deepspeed --include)"),
    (1, (1, 2), True, "0,1", "--rollout_gpus 1 2: GPU 1 is also the trainer's (CUDA_VISIBLE_DEVICES 0,1)"),
    (2, (2, 3), True, "0,1", None),
])
def test_a_producer_is_placed_only_on_gpus_the_trainer_does_not_use(async_rollout, gpus, on_gpu, trainer, expected):
    args = SimpleNamespace(async_rollout=async_rollout, rollout_gpus=gpus)
    assert producer_placement_error(args, on_gpu, trainer) == expected


def test_the_preflight_places_the_producer_as_the_run_does(monkeypatch):
    """The pre-flight, outside deepspeed, takes the trainer's GPUs to be the first N (deepspeed --num_gpus N)."""
    from dschat.cli import preflight
    from dschat.cli.ppo import build_parser

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    args = build_parser().parse_config(["--output_dir", "x", "--reward_model_name_or_path", "tiny-gemma",
                                        "--async_rollout", "1", "--rollout_gpus", "2", "3"])
    gpus = ["GPU 0", "GPU 1", "GPU 2", "GPU 3"]
    placed = preflight.engine_check("ppo", args, gpus, processes=2)
    assert placed.ok and placed.line.endswith("producer 1 iteration(s) ahead on GPUs 2 3")
    overlapping = preflight.engine_check("ppo", args, gpus, processes=3)
    assert not overlapping.ok and overlapping.line == ("engine: --rollout_gpus 2 3: GPU 2 is also the trainer's "
                                                       "(CUDA_VISIBLE_DEVICES 0,1,2)")


def test_the_plan_counts_each_producer_gpu(monkeypatch):
    """With --rollout_gpus the plan holds the producer GPUs (for each producer on one, with the hf engine: the
    actor's copy, its generation and one received group), counts them in the launch, and judges the fullest GPU."""
    from dschat.cli import plan
    from dschat.cli.ppo import build_parser
    from dschat.training.memory_plan import DTYPE_BYTES, generation_activations

    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    flags = ["--output_dir", "x", "--reward_model_name_or_path", "tiny-gemma", "--async_rollout", "1",
             "--per_device_generation_batch_size", "4", "--per_device_train_batch_size", "4"]
    on_cpu = plan.ppo_plan(build_parser().parse_config(flags), 2)
    on_gpus = plan.ppo_plan(build_parser().parse_config(flags + ["--rollout_gpus", "2", "3"]), 2)
    assert (on_cpu.producer_gpus, on_cpu.gpus, on_cpu.producer) == (0, 2, 0.0)
    shape = plan.model_shape("tiny-gemma", "lm")
    weights = DTYPE_BYTES[on_gpus.dtype] * shape.params
    args = build_parser().parse_config(flags)
    expected = (weights + generation_activations(shape, on_gpus.dtype, 4, args.max_prompt_seq_len,
                                                 args.max_new_tokens) + min(plan.SYNC_GROUP_BYTES, weights))
    assert (on_gpus.producer_gpus, on_gpus.gpus) == (2, 4)
    assert on_gpus.producer == pytest.approx(expected)
    assert on_gpus.trainer_peak == pytest.approx(on_cpu.trainer_peak)
    assert on_gpus.peak == max(on_gpus.trainer_peak, on_gpus.producer)
    text = plan.report(on_gpus, 80.0)
    assert "rollout producer GPU (1 producer(s) each" in text and "all 4 GPU(s)" in text
    shared = plan.ppo_plan(build_parser().parse_config(flags + ["--rollout_gpus", "2"]), 2)
    assert (shared.producer_gpus, shared.gpus) == (1, 3) and shared.producer == pytest.approx(2 * expected)
