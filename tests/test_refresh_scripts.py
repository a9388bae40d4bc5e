"""The catalog refresh scripts (scripts/refresh_gpus.py, refresh_prices.py, build_software_data.py): each
parses its source, rebuilds its CSV in memory, shows the diff and writes only with --write. Run on small
fixtures in tests/fixtures/refresh (no network); every file they write goes to tmp_path.

Expected values are read off the fixtures by hand (cited next to each number)."""
from __future__ import annotations

import csv
import io
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "refresh"
sys.path.insert(0, str(ROOT / "scripts"))

import _csvdiff  # noqa: E402
import build_hardware_data as bhd  # noqa: E402
import build_software_data as bsd  # noqa: E402
import refresh_gpus  # noqa: E402
import refresh_prices  # noqa: E402


def _csv(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


# ----------------------------------------------------------------------------- SkyPilot -> prices.csv

def _offerings():
    text = (FIX / "skypilot-vms.csv").read_text(encoding="utf-8")
    return refresh_prices.offerings_from_vms(text, "lambda", "skypilot-org/skypilot-catalog:catalogs/v9/lambda/vms.csv@abc",
                                             "2026-12-03")


def test_skypilot_rows_are_aggregated_per_instance():
    offers = {(o["instance_type"], o["accelerator"]): o for o in _offerings()}
    # CPU-only and the 0.5-GPU row are not offerings of a whole accelerator
    assert set(offers) == {("gpu_8x_h100_sxm5", "H100"), ("gpu_1x_gh200", "GH200"), ("gpu_1x_z9000", "Z9000")}
    h100 = offers[("gpu_8x_h100_sxm5", "H100")]
    # fixture: us-east-1 23.92; us-west-1 has two zones at 25.0 and 24.0 -> 24.0; cheapest region us-east-1
    assert h100["price_usd_per_hour_on_demand"] == "23.92" and h100["example_region"] == "us-east-1"
    assert h100["price_usd_per_hour_on_demand_median"] == "23.96"     # median(23.92, 24.0)
    assert h100["price_usd_per_hour_spot_min"] == "11.5"              # min(12.0, 11.5); us-east-1 has none
    assert h100["regions_count"] == 2 and h100["accelerator_count"] == 8
    assert h100["accelerator_memory_gib"] == "80"                     # SizeInMiB 81920 / 1024
    assert offers[("gpu_1x_gh200", "GH200")]["accelerator_memory_gib"] == "96"
    assert offers[("gpu_1x_gh200", "GH200")]["price_usd_per_hour_spot_min"] == ""


def test_offerings_map_to_catalog_ids_and_unknown_names_are_dropped():
    prices, dropped = bhd.build_prices(_offerings())
    by_inst = {p["instance_type"]: p for p in prices}
    assert by_inst["gpu_8x_h100_sxm5"]["gpu_id"] == "h100-sxm"         # the instance name says SXM
    assert by_inst["gpu_1x_gh200"]["gpu_id"] == "gh200"
    assert by_inst["gpu_8x_h100_sxm5"]["gpus_per_instance"] == 8
    assert by_inst["gpu_8x_h100_sxm5"]["source_url"] == (
        "https://github.com/skypilot-org/skypilot-catalog/blob/abc/catalogs/v9/lambda/vms.csv")
    assert dropped == {"no catalog id for 'Z9000'": 1}


def test_gpu_info_in_either_spelling():
    assert refresh_prices._gpu_memory_gib('{"Gpus": [{"MemoryInfo": {"SizeInMiB": 24576}}]}') == "24"
    assert refresh_prices._gpu_memory_gib("{'Gpus': [{'MemoryInfo': {'SizeInMiB': 16384}}]}") == "16"
    assert refresh_prices._gpu_memory_gib("") == "" and refresh_prices._gpu_memory_gib("not a dict") == ""


def test_refresh_prices_is_a_dry_run_unless_told_to_write(tmp_path, capsys):
    old = "provider,instance_type\nlambda,gpu_1x_old\n"
    (tmp_path / "prices.csv").write_text(old, encoding="utf-8")
    argv = ["--vms", f"lambda={FIX / 'skypilot-vms.csv'}", "--commit", "abc", "--retrieved", "2026-12-03",
            "--out", str(tmp_path)]
    text = refresh_prices.main(argv)
    assert (tmp_path / "prices.csv").read_text(encoding="utf-8") == old          # nothing written
    assert "2 added" in text and "dry run" in text and "+ lambda/gpu_8x_h100_sxm5/H100/8" in text
    refresh_prices.main(argv + ["--write"])
    rows = _csv((tmp_path / "prices.csv").read_text(encoding="utf-8"))
    assert [r["gpu_id"] for r in rows] == ["gh200", "h100-sxm"]
    assert "unchanged" in refresh_prices.main(argv)                              # idempotent
    capsys.readouterr()


# ----------------------------------------------------------------------------- sheets -> gpus.csv

def test_gpu_sources_are_merged_with_the_id_mapping(tmp_path):
    rows = {r["id"]: r for r in bhd.build_gpus(FIX, FIX / "gpu-datasheets.csv")}
    # research row 'NVIDIA L4' -> id l4 with its observed usable memory (IDS table: 23034 MiB)
    assert rows["l4"]["usable_memory_mib"] == 23034 and rows["l4"]["family"] == "ada"
    assert rows["l4"]["source_url"] == "https://www.nvidia.com/en-us/data-center/l4/"   # first of the sheet's URLs
    # datasheet row: PCIe 5.0 x8 -> 8 lanes x 4 GB/s x 2 directions = 64 GB/s bidirectional fallback link
    ds = rows["rtx-5060-ti-16gb"]
    assert ds["scale_up_gbps_bidir"] == 64 and ds["retrieved"] == "2026-12-03"
    assert ds["fp4_tflops"] == "379.5"            # NVIDIA's 759 AI TOPS (FP4 sparse) / 2, as typed in the source


def test_duplicate_ids_across_sources_are_refused(tmp_path):
    dup = tmp_path / "dup.csv"
    text = (FIX / "gpu-datasheets.csv").read_text(encoding="utf-8").replace("rtx-5060-ti-16gb,", "l4,", 1)
    dup.write_text(text, encoding="utf-8")
    with pytest.raises(SystemExit):
        bhd.build_gpus(FIX, dup)


def test_refresh_gpus_shows_the_diff_and_writes_only_when_asked(tmp_path, capsys):
    out = tmp_path / "data"
    out.mkdir()
    argv = ["--shared", str(FIX), "--datasheets", str(FIX / "gpu-datasheets.csv"), "--out", str(out)]
    text = refresh_gpus.main(argv)
    assert not (out / "gpus.csv").exists() and "dry run" in text and "+ l4" in text
    refresh_gpus.main(argv + ["--write"])
    ids = [r["id"] for r in _csv((out / "gpus.csv").read_text(encoding="utf-8"))]
    assert ids[0] == "l4" and ids[-1] == "rtx-5060-ti-16gb" and len(ids) == 1 + len(bhd.EXTRA_ROWS) + 1
    # a changed source value shows as a changed column of that id
    edited = tmp_path / "edited.csv"
    edited.write_text((FIX / "gpu-datasheets.csv").read_text(encoding="utf-8").replace(",448,", ",450,", 1),
                      encoding="utf-8")
    text = refresh_gpus.main(["--shared", str(FIX), "--datasheets", str(edited), "--out", str(out)])
    assert "0 added, 0 removed, 1 changed" in text and "~ rtx-5060-ti-16gb: mem_bandwidth_gbps" in text
    capsys.readouterr()


def test_shipped_csvs_are_what_the_scripts_build(tmp_path, capsys):
    """The package's gpus.csv and software.csv equal a fresh build (from the sources in the repository and the
    research sheet, when this checkout can see it): nobody edited the products by hand."""
    # the research sheet sits next to the checkout (/work/shared/data for /work/main and for /work/wt/<name>)
    shared = next((p for p in (ROOT.parent / "shared" / "data", ROOT.parent.parent / "shared" / "data")
                   if (p / "gpu-specs.csv").exists()), None)
    if shared is None:
        pytest.skip("research sheet not available in this checkout")
    data = tmp_path / "data"
    shutil.copytree(ROOT / "src" / "gpuplan" / "hardware" / "data", data)
    assert "unchanged" in refresh_gpus.main(["--shared", str(shared), "--out", str(data)])
    assert "unchanged" in bsd.main(["--out", str(data)])
    capsys.readouterr()


def test_summary_counts_rows_by_key():
    old = "id,a\nx,1\ny,2\n"
    new = "id,a\ny,3\nz,1\n"
    s = _csvdiff.summary(old, new, ("id",))
    assert s == {"added": [("z",)], "removed": [("x",)], "changed": [(("y",), ["a"])]}
