"""When no signature names the failure: the query engine over the ranks' errors, and honest abstention.

The pastes are real output quoted in public threads (the NCCL interface list, the Java server's
bind error, the Windows traceback) or torch 2.13's own exception shapes.
"""

from __future__ import annotations

from tests.log_paste import verdict_for
from triage.core.logscan.patterns import compile_signatures
from triage.core.logscan.scanner import Scanner, scan_lines
from triage.core.logscan.verdict import decide
from triage.core.model import KnowledgeBase

JAVA_BIND = """\
[22:40:52 WARN]: **** FAILED TO BIND TO PORT!
[22:40:52 WARN]: The exception was: io.netty.channel.unix.Errors$NativeIoException: bind(..) failed: Address already in use
[22:40:52 WARN]: Perhaps a server is already running on that port?
[22:40:52 ERROR]: Encountered an unexpected exception
java.lang.IllegalStateException: Failed to bind to port
        at net.minecraft.server.dedicated.DedicatedServer.initServer(DedicatedServer.java:286) ~[paper-1.21.1.jar:1.21.1]
Caused by: io.netty.channel.unix.Errors$NativeIoException: bind(..) failed: Address already in use
"""

NCCL_INTERFACES = """\
INFO NET/Socket : Using
[0]bond0:192.168.1.161<0>
[1]br-05ab815fa14e:172.19.0.1<0>
[2]br-d5d80d7dbbad:172.21.0.1<0>
[3]br-dd40dc616638:172.30.0.1<0>
[4]br-e3fd6ba7b530:192.168.16.1<0>
[12]veth6163fba:fe80::b878:6cff:fe52:abe2%veth6163fba<0>
"""


def test_a_paste_from_another_stack_gets_no_diagnosis_from_words(kb: KnowledgeBase) -> None:
    """A Java server's bind error shares words with the port-collision entry, and nothing else."""
    verdict = verdict_for(kb, JAVA_BIND)
    assert not verdict.found
    assert not verdict.by_query_engine


def test_nccl_output_without_a_signature_goes_to_the_query_engine(kb: KnowledgeBase) -> None:
    """The paste's first interface alone (a bond, no bridge) matches no signature."""
    verdict = verdict_for(kb, "\n".join(NCCL_INTERFACES.splitlines()[:2]) + "\n")
    assert verdict.found and verdict.by_query_engine
    assert verdict.diagnoses[0].entry_id == "MN2"


def test_a_wrapped_interface_list_naming_container_bridges_is_the_wrong_nic(
    kb: KnowledgeBase,
) -> None:
    """NCCL's interface list wrapped one per line, with docker bridges and veths: MN2's signature."""
    verdict = verdict_for(kb, NCCL_INTERFACES)
    assert verdict.found and not verdict.by_query_engine
    assert verdict.diagnoses[0].entry_id == "MN2"


MESSAGE_BELOW = """\
Traceback (most recent call last):
  File "train_gpu.py", line 106, in main_local
    trainer = Trainer(gpus=1)
pytorch_lightning.utilities.exceptions.MisconfigurationException:
            You requested GPUs: [0]
            But your machine only has: []
"""


def test_an_exception_message_on_the_next_line_is_read(kb: KnowledgeBase) -> None:
    """Both ways in (blocks and single lines) read the message printed under the exception's name."""
    by_block = Scanner(compile_signatures(kb))
    by_block.feed_block(by_block.source("paste"), MESSAGE_BELOW.encode(), 1)
    by_line = scan_lines(
        compile_signatures(kb), [("paste", n, line) for n, line in enumerate(MESSAGE_BELOW.splitlines(), 1)]
    )
    for scan in (by_block.scan, by_line):
        details = [e.text for e in scan.events if e.kind == "detail"]
        assert details == ["MisconfigurationException: You requested GPUs: [0]"]


def test_a_launcher_summary_below_its_exception_is_not_a_message(kb: KnowledgeBase) -> None:
    text = (
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
        "============================================================\n"
        "train.py FAILED\n"
    )
    verdict_scan = Scanner(compile_signatures(kb))
    verdict_scan.feed_block(verdict_scan.source("paste"), text.encode(), 1)
    assert not [e for e in verdict_scan.scan.events if e.kind == "detail"]


WINDOWS = r"""
  File "C:\Users\me\venv\lib\site-packages\torch\distributed\distributed_c10d.py", line 907, in init_process_group
    default_pg = _new_process_group_helper(
  File "C:\Users\me\venv\lib\site-packages\torch\distributed\distributed_c10d.py", line 1013, in _new_process_group_helper
    raise RuntimeError("Distributed package doesn't have NCCL " "built in")
RuntimeError: Distributed package doesn't have NCCL built in
"""


def test_a_line_two_entries_explain_goes_to_the_one_the_rest_of_the_log_supports(
    kb: KnowledgeBase,
) -> None:
    """`doesn't have NCCL built in` is a CPU build (E9) or Windows (E2): the frames say Windows."""
    linux = verdict_for(kb, WINDOWS.replace("C:\\Users\\me\\venv\\lib", "/opt/venv/lib").replace("\\", "/"))
    windows = verdict_for(kb, WINDOWS)
    assert linux.diagnoses[0].entry_id == "E9"
    assert windows.diagnoses[0].entry_id == "E2"


def test_the_query_engine_reads_the_line_of_code_above_an_exception(kb: KnowledgeBase) -> None:
    """A bare `IndexError: list index out of range` says little; the line of code the traceback
    quotes above it (`gpus[hvd.local_rank()]`) says which list: the GPUs this process can see."""
    from triage.core.logscan.verdict import fallback_text

    paste = (
        "[1,1]<stderr>:Traceback (most recent call last):\n"
        '[1,1]<stderr>:  File "tensorflow2_synthetic_benchmark.py", line 62, in <module>\n'
        "[1,1]<stderr>:    tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], 'GPU')\n"
        "[1,1]<stderr>:IndexError: list index out of range\n"
    )
    scanner = Scanner(compile_signatures(kb))
    scanner.feed_block(scanner.source("paste"), paste.encode(), 1)
    verdict = decide(scanner.scan, kb)
    text = fallback_text(scanner.scan, scanner.scan.events)
    assert text.splitlines() == [
        "tf.config.experimental.set_visible_devices(gpus[hvd.local_rank()], 'GPU')",
        "IndexError: list index out of range",
    ]
    assert verdict.by_query_engine and verdict.diagnoses[0].entry_id == "E5"
    assert verdict.first_rank == 1


NO_ROUTE = """\
ps-8:796:796 [1] NCCL INFO Bootstrap : Using enp67s0:192.168.1.8<0>
ps-8:796:796 [1] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation
ps-8:796:796 [1] NCCL INFO NET/IB : No device found.
ps-8:796:796 [1] NCCL INFO NET/Socket : Using [0]enp67s0:192.168.1.8<0>
ps-8:796:796 [1] NCCL INFO Using network Socket
ps-8:795:822 [0] include/socket.h:409 NCCL WARN Net : Connect to 192.168.1.9<54263> failed : No route to host
"""


def without_signatures(kb: KnowledgeBase, *entry_ids: str) -> KnowledgeBase:
    """The knowledge with no signatures for these entries: their lines as an unknown error class."""
    entries = dict(kb.entries)
    for entry_id in entry_ids:
        entries[entry_id] = entries[entry_id]._replace(signatures=())
    return kb._replace(entries=entries)


def test_the_first_ranks_reading_needs_a_clear_leader_over_the_log_threshold(kb: KnowledgeBase) -> None:
    """The query engine's reading of a rank's own error outranks the symptoms only when its leader
    reaches the log threshold and the runner-up is well behind: two entries close together are
    a question, not an answer."""
    from triage.core.logscan.query_reading import LOG_THRESHOLD, OWN_ERROR_LEAD, clear_lead
    from triage.core.matcher import Hit

    p1, mn2 = kb.entries["P1"], kb.entries["MN2"]
    assert clear_lead([Hit(p1, LOG_THRESHOLD + 0.05), Hit(mn2, 0.01)], LOG_THRESHOLD)
    assert not clear_lead([Hit(p1, LOG_THRESHOLD - 0.05), Hit(mn2, 0.01)], LOG_THRESHOLD)
    close = (LOG_THRESHOLD + 0.1) * (OWN_ERROR_LEAD + 0.1)
    assert not clear_lead([Hit(p1, LOG_THRESHOLD + 0.1), Hit(mn2, close)], LOG_THRESHOLD)


def test_without_an_error_of_its_own_a_weak_match_stays_unanswered(kb: KnowledgeBase) -> None:
    """The same words with no error line (INFO only): nothing failed that the log shows."""
    quiet = NO_ROUTE.replace("NCCL WARN", "NCCL INFO")
    verdict = verdict_for(without_signatures(kb, "P1", "MN2"), quiet)
    assert not verdict.found


def test_the_first_ranks_own_error_outranks_a_timeout_that_only_follows_it(kb: KnowledgeBase) -> None:
    """Rank 1 raised an error no signature names (real message from a transformers + DeepSpeed
    thread), then its watchdog timed out (real torch 2.13 line): the timeout is a symptom any
    failure shows. Rank 1's own words, read by the query engine, name the cause and come first;
    the timeout stays, below it."""
    text = (
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/workspace/train.py", line 41, in <module>\n'
        "[rank1]: ValueError: DeepSpeed Zero-3 is not compatible with `low_cpu_mem_usage=True` or with"
        " passing a `device_map`.\n"
        "[rank1]:[E1122 20:37:55.288269587 ProcessGroupNCCL.cpp:689] [Rank 1] Watchdog caught collective"
        " operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=4, NumelOut=4, Timeout(ms)=5000)"
        " ran for 5012 milliseconds before timing out.\n"
    )
    verdict = verdict_for(kb, text)
    assert verdict.found and verdict.first_rank == 1
    best, *rest = verdict.diagnoses
    assert not best.generic and best.explains_first and "own error" in best.reason
    assert best.entry_id == "E19"  # device_map / low_cpu_mem_usage under several processes
    assert "MN3" in {d.entry_id for d in rest if d.generic}
    assert all(d.score < best.score for d in rest)


def test_an_error_from_outside_the_stack_gets_no_weak_answer_though_torchrun_reported_it(
    kb: KnowledgeBase,
) -> None:
    """Real output: the user's dataset path is missing, and torchrun reports the worker's exit. The
    log has a failure, but not one the knowledge is about: the words the query engine finds
    (`dataloader`, `train`) must not make a diagnosis of it."""
    text = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 417, in _get_dataset\n'
        "    subfolders = [f.path for f in os.scandir(p) if f.is_dir()]\n"
        "FileNotFoundError: [Errno 2] No such file or directory: '/data/gx/OCR-CC/data_lmdb/training/label/Synth/'\n"
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 3692921)"
        " of binary: /home/gx/anaconda3/envs/CCD/bin/python\n"
    )
    verdict = verdict_for(kb, text)
    assert not verdict.found or not any("weakly" in d.reason for d in verdict.diagnoses)
