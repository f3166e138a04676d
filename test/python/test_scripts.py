"""The profiling helpers in scripts/ that read Nsight Compute's output, on small synthetic pages
(no GPU, no ncu): scripts/sass_stalls.py."""
from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SASS_STALLS = REPO / "scripts" / "sass_stalls.py"

HEADER = ('"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed",'
          '"stall_barrier","stall_long_sb","stall_wait","stall_barrier (Not Issued)"')
# One kernel as ncu's source page prints it: a name line, a header, one row per instruction.
KERNEL = "\n".join([
    '"Kernel Name","void consumer_kernel<128>(Params)",',
    HEADER,
    '"0x10","HGMMA.64x64x16.F32.BF16 R24, gdesc[UR16], R24","10","2,000","0","0","10","0"',
    '"0x20","WARPGROUP.DEPBAR.LE gsb0, 0x0","300","2,000","290","0","10","290"',
    '"0x30","@!P0  BRA 0x40","90","500","0","90","0","0"',
    '"0x40","STS.128 [R8+0x100], R152","600","2,000","600","0","0","600"',
])
OTHER = "\n".join([
    '"Kernel Name","void convert_kernel(Params)",',
    HEADER,
    '"0x10","LDG.E.128 R4, [R2.64]","5","100","0","5","0","0"',
])


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SASS_STALLS), *args], capture_output=True, text=True, timeout=60)


def test_sass_stalls_reads_a_page():
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "sass_shape.csv"
        # ncu may print a kernel's block twice: the identical repeat must not double its counts.
        page.write_text("\n".join([KERNEL, KERNEL, OTHER]) + "\n")
        out = run(str(page), "--kernel", "consumer", "--top", "2")
        assert out.returncode == 0, out.stderr
        text = out.stdout
        assert text.count("== void consumer_kernel") == 1 and "convert_kernel" not in text
        assert "4 instructions, 6,500 executed (warp-level), 1,000 samples" in text
        # The two hottest instructions, in program order, with their main reason.
        hot = text.split("in program order:")[1].strip().splitlines()
        assert len(hot) == 2
        assert "WARPGROUP.DEPBAR" in hot[0] and "30.0%" in hot[0] and "barrier 290" in hot[0]
        assert "STS.128" in hot[1] and "60.0%" in hot[1] and "barrier 600" in hot[1]
        # Per opcode: BRA's samples are long scoreboard (the predicate is not part of the opcode).
        bra = next(line for line in text.splitlines() if line.strip().startswith("BRA"))
        assert "long_sb 90" in bra


def test_sass_stalls_reads_the_profile_archive():
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "ncu.tgz"
        with tarfile.open(archive, "w:gz") as tar:
            data = (KERNEL + "\n").encode()
            info = tarfile.TarInfo("./sass_bwd_d128_s8192_full_bf16.csv")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        out = run(str(archive), "--file", "sass_bwd_d128_s8192_full_bf16.csv")
        assert out.returncode == 0, out.stderr
        assert "consumer_kernel" in out.stdout
        missing = run(str(archive), "--file", "sass_other.csv")
        assert missing.returncode != 0 and "sass_bwd_d128_s8192_full_bf16.csv" in missing.stderr


def test_sass_stalls_says_when_no_kernel_matches():
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "sass_shape.csv"
        page.write_text(OTHER + "\n")
        out = run(str(page), "--kernel", "bwd_kernel")
        assert out.returncode == 1 and "no kernel" in out.stderr and "convert_kernel" in out.stderr
