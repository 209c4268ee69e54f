"""Checks a built wheel against the platform tag it claims, before anything installs it.

Usage: python submit/check_wheel.py WHEEL PLATFORM   (e.g. manylinux_2_17_x86_64)

Two checks, and the build fails on either:

1. ``auditwheel show`` must find the wheel consistent with PLATFORM, and the wheel must carry
   that tag. auditwheel lowers the tag it reports when the compiled module needs a glibc
   symbol version newer than the policy's, links a library outside the policy's whitelist
   (libgssapi_krb5, which hdfs-native opens with dlopen when Kerberos is used, must stay out
   of DT_NEEDED), or needs CPU features beyond the architecture's baseline.
2. No strong undefined symbol without a version, other than Python's C API. auditwheel only
   weighs versioned symbols; a libc function that the glibc of the tag lacks (``renameat2``
   before 2.28, say) can link unversioned against zig's stubs and then fail the import on an
   old host. Weak ones are fine: their users check for null.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerSymSection


def auditwheel_platform(wheel: Path) -> str:
    show = subprocess.run(
        [sys.executable, "-m", "auditwheel", "show", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = " ".join((show.stdout + show.stderr).split())
    print(report)
    if show.returncode != 0:
        sys.exit(f"auditwheel show failed ({show.returncode})")
    found = re.search(r'consistent with the following platform tag: "([^"]+)"', report)
    if not found:
        sys.exit("auditwheel show named no platform tag")
    return found.group(1)


def unversioned_imports(library: Path) -> tuple[list[str], list[str]]:
    """The strong undefined dynamic symbols without a version, and the DT_NEEDED entries."""
    with library.open("rb") as f:
        elf = ELFFile(f)
        dynsym = elf.get_section_by_name(".dynsym")
        versym = next((s for s in elf.iter_sections() if isinstance(s, GNUVerSymSection)), None)
        dynamic = next(s for s in elf.iter_sections() if isinstance(s, DynamicSection))
        needed = [tag.needed for tag in dynamic.iter_tags() if tag.entry.d_tag == "DT_NEEDED"]
        bare = []
        for index, symbol in enumerate(dynsym.iter_symbols()):
            if index == 0 or symbol["st_shndx"] != "SHN_UNDEF":
                continue
            if symbol["st_info"]["bind"] != "STB_GLOBAL":
                continue
            # 0 and 1 are VER_NDX_LOCAL and VER_NDX_GLOBAL: no version required.
            version = versym.get_symbol(index)["ndx"] if versym else "VER_NDX_GLOBAL"
            if version in ("VER_NDX_LOCAL", "VER_NDX_GLOBAL", 0, 1) and not symbol.name.startswith(
                ("Py", "_Py")
            ):
                bare.append(symbol.name)
    return sorted(bare), needed


def main() -> None:
    wheel, platform = Path(sys.argv[1]), sys.argv[2]
    tags = wheel.name.removesuffix(".whl").split("-")[-1].split(".")
    if platform not in tags:
        sys.exit(f"{wheel.name} is not tagged {platform}")
    found = auditwheel_platform(wheel)
    if found != platform:
        sys.exit(f"auditwheel finds {wheel.name} consistent with {found}, not {platform}")
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as archive:
        modules = [n for n in archive.namelist() if n.endswith(".so")]
        for name in modules:
            bare, needed = unversioned_imports(Path(archive.extract(name, tmp)))
            print(f"{name}: needs {', '.join(needed)}")
            if bare:
                sys.exit(f"{name} imports symbols without a version, outside the manylinux policy: {bare}")
    if not modules:
        sys.exit(f"{wheel.name} holds no compiled module")
    print(f"{wheel.name}: {platform}, checked")


if __name__ == "__main__":
    main()
