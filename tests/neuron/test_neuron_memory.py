"""Memory on the emulated Neuron path (issue 19, items 3, 4 and 6): the device allocator's
totals (torch.neuron.memory_stats(), as torch-neuronx documents it) become run.memory with
device "neuron"; an out-of-memory error keeps its run and the runtime's HBM table (the Neuron
docs' device-memory page: /tmp/neuron_mem_table_device_<id>_hbm_<idx>.log) is parsed into it."""

from __future__ import annotations

import pytest
from test_neuron_path import run_scenario

from neuronscope.capture.devices.neuron_memory import parse_neuron_mem_table

MiB = 1 << 20

# The example table of the Neuron docs' device-memory page (Out-of-memory (OOM) Errors), as printed there.
DOC_TABLE = r"""
2025-May-15 20:58:33.897479 224822:224822 ERROR  TDRV:log_dev_mem                             Failed to allocate 4.000GB (alignment: none, usage: tensors) on ND 0:NC 4
2025-May-15 20:58:33.899416 224822:224822 ERROR  TDRV:log_dev_mem_usage_table                 Displaying Current Memory Utilization:
(NOTE: the lines are LONG, and NEFF id to name mapping is printed after)

              |          |  Model   |  Model   |          |  Shared  |          |          |DMA Rings |DMA Rings | DMA Rings |DMA Rings |           |          | Profiler |
              |  TOTAL   |   Code   |Constants | Tensors  |Scratchpad|Scratchpad| Runtime  |    IO    |  Spill   |Collectives| Runtime  |Collectives|  XT CC   | Buffers  |
ND 0 Overall  | 20.188GB |192.102MB | 82.344KB | 20.000GB |  0.000B  |  0.000B  |350.125KB |179.000KB | 64.000KB |  0.000B   | 68.000KB |  0.000B   |  0.000B  |  0.000B  |
\_NC 4        | 20.094GB | 96.065MB | 58.344KB | 20.000GB |  0.000B  |  0.000B  |229.062KB |118.000KB | 48.000KB |  0.000B   | 36.000KB |  0.000B   |  0.000B  |  0.000B  |
  \_NEFF 1001 |263.906KB | 28.562KB | 34.344KB |   n/a    |   n/a    |  0.000B  |108.000KB | 57.000KB | 32.000KB |  0.000B   | 4.000KB  |  0.000B   |   n/a    |   n/a    |

NEFF id to name mapping:
1001: "1.0.41235.0+df4a714bb-/local/out-test0_meta_dense"
"""


def test_the_documented_oom_table_parses():
    t = parse_neuron_mem_table(DOC_TABLE)
    assert t["failed_allocation"] == {"bytes": 4 << 30, "usage": "tensors", "where": "ND 0:NC 4"}
    assert t["categories"]["Tensors"] == 20 << 30 and t["categories"]["Model Code"] == round(192.102 * MiB)
    assert set(t["categories"]) == {
        "Model Code", "Model Constants", "Tensors", "Shared Scratchpad", "Scratchpad", "Runtime", "DMA Rings IO",
        "DMA Rings Spill", "DMA Rings Collectives", "DMA Rings Runtime", "Collectives", "XT CC", "Profiler Buffers",
    }  # fmt: skip
    assert [(r["name"], r["level"]) for r in t["rows"]] == [("ND 0 Overall", "device"), ("NC 4", "nc"), ("NEFF 1001", "neff")]
    assert "Tensors" not in t["rows"][2]["categories"]  # "n/a" cells are left out
    assert t["neffs"] == {"1001": "1.0.41235.0+df4a714bb-/local/out-test0_meta_dense"}


def test_the_older_bulleted_report_parses():
    t = parse_neuron_mem_table("Overall HBM usage\n    * total: 23.577GB\n    * shared scratchpad: 9.000GB\n    * scratchpad: 8.149GB\n")
    assert t["categories"] == {"Shared Scratchpad": 9 << 30, "Scratchpad": round(8.149 * (1 << 30))}
    assert t["total_bytes"] == round(23.577 * (1 << 30))


@pytest.fixture(scope="module")
def mem(tmp_path_factory) -> dict:
    return run_scenario("memory", tmp_path_factory.mktemp("neuron-memory"))


def test_device_memory_of_a_neuron_run(mem):
    m = mem["memory"]
    assert mem["device"] == "neuron" and m["device"] == "neuron"
    assert m["start_bytes"] == 64 * MiB and m["end_bytes"] == 192 * MiB and m["growth_bytes"] == 128 * MiB
    assert m["peak_bytes"] == 320 * MiB  # the allocator's peak rose inside the window
    assert m["device_facts"]["neuron_memory_stats"]["end"]["allocated_bytes.all.current"] == 192 * MiB
    assert m["device_facts"]["host"]["peak_bytes"] >= 0  # what the host allocated is kept beside it
    assert mem["memory_line"].startswith("memory peak 320 MiB")
    assert mem["summary_memory"]["peak_bytes"] == 320 * MiB


def test_neuron_oom_keeps_the_run_with_the_runtime_table(mem):
    assert mem["oom_status"] == "error" and mem["oom_error"] == "RuntimeError"
    assert "Failed to allocate 4.000GB (alignment: none, usage: tensors) on ND 0:NC 0" in mem["raised"]  # unchanged
    assert mem["table_files"] == ["neuron_mem_table_device_0_hbm_0.log"]
    m = mem["oom_memory"]
    table = m["device_facts"]["neuron_oom_table"]
    assert table["device"] == 0 and table["hbm"] == 0
    assert table["categories"]["Tensors"] == 704 * MiB and table["categories"]["Shared Scratchpad"] == 512 * MiB
    assert m["oom"]["requested_bytes"] == 4 << 30 and m["oom"]["usage"] == "tensors"
    assert m["at_peak"][0]["op"] == "HBM: Tensors" and m["at_peak"][0]["bytes"] == 704 * MiB
    oom = next(f for f in mem["oom_findings"] if f["rule"] == "out_of_memory")
    assert "Tensors 704 MiB" in oom["message"] and oom["evidence"]["requested_bytes"] == 4 << 30
    # the emulator wrote the documented shape: it parses the same as the docs' own example
    assert set(mem["table_parsed"]["categories"]) == set(parse_neuron_mem_table(DOC_TABLE)["categories"])
