"""Every failure reproduction, with the entry it shows and how it is launched."""

from __future__ import annotations

from triage.repro.scenario import _DDP_UNDER_DETAIL, Scenario

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "D1",
        "init_process_group run with plain `python`, no launcher",
        "init_without_launcher.py",
        expect="D1",
        first_rank=None,
        launch="python",
        bound_s=30,
    ),
    Scenario(
        "D4",
        "a second torchrun on the master port the first job holds",
        "train_port_holder.py",
        expect="D4",
        first_rank=None,
        launch="two-jobs",
        bound_s=60,
    ),
    Scenario(
        "D8",
        "a DDP parameter that never receives a gradient",
        "train_unused_param.py",
        expect="D8",
        first_rank=None,  # every rank fails the same way; any of them may print first
        skip=_DDP_UNDER_DETAIL,
    ),
    Scenario(
        "D9",
        "rank 1 has fewer batches than rank 0 (caught by Join)",
        "train_uneven.py",
        expect="D9",
        first_rank=None,  # both ranks raise at the same step; print order varies
        also=("D22",),
        skip=_DDP_UNDER_DETAIL,
    ),
    Scenario(
        "D19",
        "an all-reduce only rank 0 calls, under TORCH_DISTRIBUTED_DEBUG=DETAIL",
        "train_rank0_collective.py",
        expect="D19",
        first_rank=None,  # both ranks detect the mismatch at once
        env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"},
        also=("D21",),
        skip={
            "debug-info": "the scenario is the DETAIL run; INFO would not report the mismatch",
            "debug-detail": "the scenario already runs under DETAIL",
        },
    ),
    Scenario(
        "D21",
        "an all-reduce only rank 0 calls, then a barrier on every rank",
        "train_rank0_collective.py",
        expect="D21",
        first_rank=None,  # both ranks time out in their own collective
        also=("MN3",),
        skip={"debug-detail": "under DETAIL torch names the mismatch itself: that run is the D19 scenario"},
    ),
    Scenario(
        "D20",
        "rank 1 raises on a NaN loss while rank 0 waits in the all-reduce",
        "train_diverged.py",
        expect="D20",
        first_rank=1,
        skip=_DDP_UNDER_DETAIL,
    ),
    Scenario(
        "MN3",
        "rank 1 stalls longer than the collective timeout",
        "train_straggler.py",
        expect="MN3",
        first_rank=0,  # the rank that times out first; the straggler itself reports nothing
        skip=_DDP_UNDER_DETAIL,
    ),
    Scenario(
        "MN5",
        "torchrun --max-restarts relaunches a job that never reloads its checkpoint",
        "train_restart.py",
        expect="MN5",
        first_rank=1,
        bound_s=90,
        # INFO makes torchrun print its restart decisions; restarting needs its own store here.
        env={"LOGLEVEL": "INFO", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"},
        torchrun_args=("--max-restarts=1",),
        skip=_DDP_UNDER_DETAIL,
    ),
    Scenario(
        "D23",
        "every rank saves the same checkpoint file at once",
        "train_same_checkpoint.py",
        expect="D23",
        first_rank=0,
    ),
    Scenario(
        "E4",
        "an evaluation script run with plain `python` calls get_rank() and builds SyncBatchNorm",
        "no_process_group.py",
        expect="E4",
        first_rank=None,
        launch="python",
        bound_s=30,
    ),
    Scenario(
        "E9",
        "backend='nccl' on a machine without a usable GPU (here: the CPU-only wheel)",
        "nccl_without_gpu.py",
        expect="E9",
        first_rank=None,  # both ranks fail the same way
        env={"CUDA_VISIBLE_DEVICES": ""},
        torchrun_args=("--tee", "3"),  # the failure is in init, before torch prefixes lines with the rank
        skip={"tee": "the scenario already runs with --tee", "log-dir": "--tee and --log-dir together"},
    ),
    Scenario(
        "E14",
        "torch.multiprocessing.spawn of a function defined inside main()",
        "spawn_local_function.py",
        expect="E14",
        first_rank=None,
        launch="python",
        bound_s=30,
    ),
    Scenario(
        "D8-CKPT",
        "reentrant activation checkpointing in a DDP model with find_unused_parameters=True",
        "train_checkpointing_ddp.py",
        expect="D8",
        first_rank=None,  # every rank fails the same way
        skip=_DDP_UNDER_DETAIL,
    ),
    Scenario(
        "P1",
        "node 0 of two starts; node 1 never joins the TCP store",
        "store_missing_node.py",
        expect="P1",
        first_rank=None,
        launch="python",
        bound_s=40,
    ),
    Scenario(
        "MN3-RANK0",
        "rank 0 tokenises alone while rank 1 waits at a barrier with a short timeout",
        "rank0_alone_in_barrier.py",
        expect="MN3",
        first_rank=1,  # the waiting rank times out; rank 0 is still working when torchrun stops it
        skip={
            "debug-detail": "under DETAIL the barrier becomes torch's monitored barrier, which reports rank 0 as"
            " the faulty rank that never arrived: a missing collective (D21) and a slow rank read the same there"
        },
    ),
    Scenario(
        "D15",
        "a torch.distributed.checkpoint saved by two ranks, resumed by one",
        "dcp_resume_other_world.py",
        expect="D15",
        first_rank=0,
        needs={
            "numpy": "torch.distributed.checkpoint gathers its plans with object collectives, which need numpy"
        },
    ),
    Scenario(
        "P6",
        "rank 1 segfaults in native code mid-training, with no Python traceback",
        "rank_dies.py",
        expect="P6",
        first_rank=1,
        env={"TRIAGE_REPRO_HOW": "segv"},
    ),
    Scenario(
        "D19-SIZE",
        "the ranks all-reduce tensors of different sizes (gloo aborts on the mismatch)",
        "collective_sizes.py",
        expect="D19",
        first_rank=0,  # the rank that receives more bytes than it expects aborts; the other is reset
        skip={
            "debug-detail": "under DETAIL every rank names the mismatch at once: that run is the D19 scenario's"
        },
    ),
    Scenario(
        "E13",
        "MASTER_ADDR names a head node that does not resolve on this node",
        "unresolvable_master.py",
        expect="E13",
        first_rank=None,
        launch="python",
        bound_s=40,
    ),
    Scenario(
        "D9-NOJOIN",
        "rank 1 has fewer batches and leaves; rank 0 loses its peer in the next all-reduce (no Join)",
        "train_uneven_no_join.py",
        expect="D9",
        first_rank=0,  # the rank with the extra batch is the one that fails
    ),
    Scenario(
        "P4",
        "rank 1 calls sys.exit(3) without printing why while rank 0 waits in the all-reduce",
        "rank_dies.py",
        expect="P4",
        first_rank=1,
        env={"TRIAGE_REPRO_HOW": "exit"},
    ),
    Scenario(
        "E17",
        "GLOO_SOCKET_IFNAME names an interface this host does not have",
        "gloo_wrong_interface.py",
        expect="E17",
        first_rank=None,  # every rank fails the same way
        env={"GLOO_SOCKET_IFNAME": "ib-does-not-exist0"},
        torchrun_args=("--tee", "3"),  # the failure is in init, before torch prefixes lines with the rank
        skip={"tee": "the scenario already runs with --tee", "log-dir": "--tee and --log-dir together"},
    ),
    Scenario(
        "E12",
        "gradient accumulation with no_sync() on every micro-step: replicas compared after the step",
        "accumulation_never_syncs.py",
        expect="E12",
        first_rank=1,
        skip=_DDP_UNDER_DETAIL,
    ),
    Scenario(
        "E4-TORCHRUN",
        "a script launched with torchrun builds its DistributedSampler without init_process_group",
        "train_no_init.py",
        expect="E4",
        first_rank=None,  # every rank fails the same way
    ),
    Scenario(
        "X3",
        "the OOM killer sends SIGKILL to rank 1 mid-training (no traceback)",
        "rank_dies.py",
        expect="X3",
        first_rank=1,
        env={"TRIAGE_REPRO_HOW": "kill"},
    ),
    Scenario(
        "X4",
        "one of rank 1's DataLoader workers is killed (SIGKILL) while rank 0 waits in the all-reduce",
        "loader_worker_fails.py",
        expect="X4",
        first_rank=1,
        env={"TRIAGE_REPRO_HOW": "kill"},
    ),
    Scenario(
        "E6",
        "a 2x2 DeviceMesh written for 4 processes, launched with 2",
        "mesh_bigger_than_world.py",
        expect="E6",
        first_rank=None,  # every rank fails the same way
    ),
    Scenario(
        "E15",
        "FSDP1 wraps a model with a frozen layer as one unit (use_orig_params=False)",
        "fsdp_frozen_layer.py",
        expect="E15",
        first_rank=None,  # every rank fails the same way
    ),
    Scenario(
        "D10",
        "a model converted to SyncBatchNorm wrapped in DDP on the CPU",
        "syncbn_on_cpu.py",
        expect="D10",
        first_rank=None,  # every rank fails the same way
        skip=_DDP_UNDER_DETAIL,
    ),
    Scenario(
        "E9-SETDEVICE",
        "torch.cuda.set_device(LOCAL_RANK) with the CPU-only wheel (gloo backend)",
        "set_device_cpu_only.py",
        expect="E9",
        first_rank=None,  # every rank fails the same way
    ),
    Scenario(
        "D2",
        "a two-node torchrun command (--nnodes=2) started on one node only",
        "nnodes_mismatch.py",
        expect="D2",
        first_rank=None,
        workers_start=False,  # torchrun waits for the other node and never starts a worker
        # the rendezvous gives up after join_timeout (600 s by default): shortened, the lines are the same
        torchrun_args=("--nnodes=2", "--rdzv-conf=join_timeout=5"),
    ),
    Scenario(
        "D1-LAUNCH",
        "a script that reads LOCAL_RANK from the environment started with torch.distributed.launch",
        "local_rank_argument.py",
        expect="D1",
        first_rank=None,  # every rank fails the same way
        launch="launch",
        env={"TRIAGE_REPRO_HOW": "rejects"},
    ),
    Scenario(
        "D1-LOCALRANK",
        "a script that requires --local_rank (written for torch.distributed.launch) started with torchrun",
        "local_rank_argument.py",
        expect="D1",
        first_rank=None,  # every rank fails the same way
        env={"TRIAGE_REPRO_HOW": "requires"},
    ),
    Scenario(
        "D20-LOADER",
        "a corrupt sample raises in one of rank 1's DataLoader workers while rank 0 waits in the all-reduce",
        "loader_worker_fails.py",
        expect="D20",
        first_rank=1,
        env={"TRIAGE_REPRO_HOW": "raise"},
    ),
    Scenario(
        "D6-TWICE",
        "init_process_group called, then called again by a setup helper",
        "init_twice.py",
        expect="D6",
        first_rank=None,  # every rank fails the same way
    ),
    Scenario(
        "D20-SPAWN",
        "mp.spawn: process 1 raises on a NaN loss while process 0 is still evaluating",
        "rank_dies.py",
        expect="D20",
        first_rank=1,
        launch="python",
        bound_s=40,
        env={"TRIAGE_REPRO_HOW": "raise"},
    ),
    Scenario(
        "X3-SPAWN",
        "mp.spawn: the OOM killer sends SIGKILL to process 1 while process 0 is still evaluating",
        "rank_dies.py",
        expect="X3",
        first_rank=1,
        launch="python",
        bound_s=40,
        env={"TRIAGE_REPRO_HOW": "kill"},
    ),
    Scenario(
        "P6-SPAWN",
        "mp.spawn: process 1 segfaults in native code while process 0 is still evaluating",
        "rank_dies.py",
        expect="P6",
        first_rank=1,
        launch="python",
        bound_s=40,
        env={"TRIAGE_REPRO_HOW": "segv"},
    ),
    Scenario(
        "E20",
        "each rank sizes its embedding from the vocabulary of its own data shard, then builds DDP",
        "ddp_model_differs.py",
        expect="E20",
        first_rank=1,  # only the rank whose shapes differ from rank 0's fails the check; rank 0 goes on
    ),
    Scenario(
        "D1-WORLD",
        "init_process_group(world_size=4) hard-coded in a script launched with two processes",
        "world_size_hardcoded.py",
        expect="D1",
        first_rank=None,  # every rank waits the same way
        env={"TRIAGE_REPRO_HOW": "world"},
    ),
    Scenario(
        "D1-RANK",
        "init_process_group(rank=0) hard-coded: both processes of a torchrun job claim rank 0",
        "world_size_hardcoded.py",
        expect="D1",
        first_rank=None,  # every rank waits the same way
        env={"TRIAGE_REPRO_HOW": "rank"},
    ),
    Scenario(
        "X1-CPU",
        "every rank builds a model larger than the host's memory before wrapping it in DDP",
        "cpu_out_of_memory.py",
        expect="X1",
        first_rank=None,  # every rank fails the same way (before DDP exists: DETAIL runs too)
    ),
    Scenario(
        "X2",
        "the scheduler preempts the job: torchrun receives SIGTERM mid-training",
        "preempted.py",
        expect="X2",
        first_rank=None,
        stopped_from_outside=True,
    ),
    Scenario(
        "P8",
        "a breakpoint() left in rank 0's training loop, run under torchrun (no terminal)",
        "breakpoint_left_in.py",
        expect="P8",
        first_rank=0,
    ),
    Scenario(
        "D20-BACKWARD",
        "rank 1 raises inside loss.backward() while rank 0 waits in DDP's gradient all-reduce",
        "train_diverged.py",
        expect="D20",
        first_rank=1,
        env={"TRIAGE_REPRO_HOW": "backward"},
        skip=_DDP_UNDER_DETAIL,
    ),
    Scenario(
        "D20-SPAWN-SURVIVOR",
        "mp.spawn: process 1 raises on a NaN loss and cleans up slowly; spawn reports process 0's lost peer",
        "spawn_slow_cleanup.py",
        expect="D20",
        first_rank=1,
        launch="python",
        bound_s=40,
        skip={
            "debug-detail": "under DETAIL process 0 waits in torch's monitored barrier instead of losing its"
            " peer, and names process 1 as never arriving: that output is a missing collective's (D21)"
        },
    ),
    Scenario(
        "D20-SHELL",
        "started by hand (one `python` per rank, RANK and MASTER_ADDR exported): rank 1 raises on a NaN loss",
        "train_diverged.py",
        expect="D20",
        first_rank=1,
        launch="shell",
        bound_s=40,
        skip=_DDP_UNDER_DETAIL,
    ),
    Scenario(
        "D4-SPAWN",
        "mp.spawn with the tutorial's hard-coded MASTER_PORT, which another job on the host still holds",
        "spawn_setup.py",
        expect="D4",
        first_rank=0,  # the process that hosts the store
        launch="python",
        bound_s=40,
        env={"TRIAGE_REPRO_HOW": "port"},
    ),
    Scenario(
        "D1-SPAWN",
        "mp.spawn whose setup() sets MASTER_PORT but not MASTER_ADDR",
        "spawn_setup.py",
        expect="D1",
        first_rank=None,  # every process fails the same way; spawn reports whichever it finds first
        launch="python",
        spawns_ranks=True,
        bound_s=40,
        env={"TRIAGE_REPRO_HOW": "no-addr"},
    ),
    Scenario(
        "P4-SPAWN",
        "mp.spawn: process 1 calls sys.exit(3) without printing why while process 0 is still evaluating",
        "rank_dies.py",
        expect="P4",
        first_rank=1,
        launch="python",
        bound_s=40,
        env={"TRIAGE_REPRO_HOW": "exit"},
    ),
    Scenario(
        "MN3-SHELL",
        "started by hand (one `python` per rank): rank 1 stalls longer than the collective timeout",
        "train_straggler.py",
        expect="MN3",
        first_rank=0,  # the rank that times out first; the straggler fails only when it comes back
        launch="shell",
        bound_s=40,
        skip=_DDP_UNDER_DETAIL,
    ),
    Scenario(
        "D19-GATHER",
        "the ranks all-gather predictions of different lengths into buffers sized like their own",
        "collective_sizes.py",
        expect="D19",
        first_rank=0,  # the rank whose buffers are too small for what arrives aborts; the other goes on
        env={"TRIAGE_REPRO_HOW": "gather"},
        skip={
            "debug-detail": "under DETAIL every rank names the mismatch at once: that run is the D19 scenario's"
        },
    ),
    Scenario(
        "D13",
        "FSDP1 with sharding_strategy=HYBRID_SHARD and the model wrapped by hand (no wrap policy, no mesh)",
        "fsdp_hybrid_manual.py",
        expect="D13",
        first_rank=None,  # every rank fails the same way
    ),
    Scenario(
        "D20-ACCELERATE",
        "launched with `accelerate launch`: rank 1 raises on a NaN loss while rank 0 waits in the all-reduce",
        "train_diverged.py",
        expect="D20",
        first_rank=1,
        launch="accelerate",
        skip=_DDP_UNDER_DETAIL,
        needs={"accelerate": "the launcher"},
    ),
    Scenario(
        "D14",
        "FSDP1 with bf16 MixedPrecision wraps the body; the fp32 head left outside it gets bf16 features",
        "fsdp_mixed_precision_head.py",
        expect="D14",
        first_rank=None,  # every rank fails the same way
    ),
    Scenario(
        "P1-CLIENT",
        "node 1 of two starts; nothing answers at the MASTER_ADDR:MASTER_PORT it was given",
        "store_unreachable.py",
        expect="P1",
        first_rank=None,
        launch="python",
        bound_s=40,
    ),
    Scenario(
        "E9-SPAWN",
        "mp.spawn with the tutorial's setup() asking for backend='nccl' on a machine with no usable GPU",
        "spawn_setup.py",
        expect="E9",
        first_rank=None,  # every process fails the same way; spawn reports whichever it finds first
        launch="python",
        spawns_ranks=True,
        bound_s=40,
        env={"TRIAGE_REPRO_HOW": "nccl", "CUDA_VISIBLE_DEVICES": ""},
    ),
)
