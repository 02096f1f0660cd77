"""Before the window opens on X11: does this system have the libraries Qt's xcb platform plugin
loads?

Without them Qt 6.5+ aborts with a core dump and "xcb-cursor0 or libxcb-cursor0 is needed to
load the Qt xcb platform plugin" (a fresh desktop often lacks libxcb-cursor0, libxcb-icccm4
and libxcb-keysyms1). `problem()` says instead, in one line, which libraries are missing and
the one `apt-get install -y ...` line that installs them; `specdec-gui` prints it and exits
with status 2 before it creates the application (and `./playground gui` before its setup).

`XCB_LIBRARIES` is what PySide6's `plugins/platforms/libqxcb.so` and the Qt libraries it
loads link from the system (`ldd` on the plugin; tests/test_qt_platform.py holds the table to
the installed plugin), with the Debian / Ubuntu package of each. A library counts as present
when the dynamic linker's cache (`ldconfig -p`, this machine's architecture) or a folder of
LD_LIBRARY_PATH has it.

The check applies where Qt will load the xcb plugin: the platform asked for (`-platform NAME`
on the command line, else the first of QT_QPA_PLATFORM's `;`-separated names) is xcb, or none
is asked for outside a Wayland session (no WAYLAND_DISPLAY; in one, Qt uses its wayland
plugin). Another platform (offscreen, wayland, vnc, …) skips it. With the libraries present
but no X display to open (no DISPLAY, no `-display`) the line says that instead of Qt's
abort.

Standard library only: `python3 -m app.qt_platform [Qt arguments]` runs before the setup has
made the virtual environment.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

EXIT_CODE = 2
XCB_LIBRARIES: dict[str, str] = {  # soname -> the Debian / Ubuntu package that has it
    "libxcb.so.1": "libxcb1",
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-render.so.0": "libxcb-render0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-util.so.1": "libxcb-util1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libX11.so.6": "libx11-6",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libGL.so.1": "libgl1",
    "libEGL.so.1": "libegl1",
    "libfontconfig.so.1": "libfontconfig1",
    "libfreetype.so.6": "libfreetype6",
    "libglib-2.0.so.0": "libglib2.0-0",
    "libgthread-2.0.so.0": "libglib2.0-0",
    "libdbus-1.so.3": "libdbus-1-3",
}
ARCH_TAGS = {"x86_64": "x86-64", "aarch64": "AArch64"}  # as `ldconfig -p` marks 64-bit libraries
CACHE_LINE = re.compile(r"^\s*(\S+)\s+\(([^)]*)\)\s+=>")


def requested_platform(environ: Mapping[str, str], qt_args: Iterable[str] = ()) -> str:
    """The platform plugin asked for ('' when none): `-platform NAME` wins over
    QT_QPA_PLATFORM, whose first `;`-separated entry is tried first (`xcb:arg` names xcb)."""
    args = list(qt_args)
    for index, arg in enumerate(args):
        if arg in ("-platform", "--platform") and index + 1 < len(args):
            return args[index + 1].split(":")[0].strip().lower()
    first = environ.get("QT_QPA_PLATFORM", "").split(";")[0]
    return first.split(":")[0].strip().lower()


def uses_xcb(environ: Mapping[str, str], qt_args: Iterable[str] = ()) -> bool:
    """Will Qt load its xcb plugin here? (see the module)"""
    if not sys.platform.startswith("linux"):
        return False
    name = requested_platform(environ, qt_args)
    if name:
        return name == "xcb"
    return not environ.get("WAYLAND_DISPLAY")


def linker_cache() -> set[str] | None:
    """The sonames in the dynamic linker's cache for this machine's architecture; None when
    `ldconfig` cannot be run (then nothing is known missing)."""
    ldconfig = shutil.which("ldconfig") or next(
        (p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if Path(p).is_file()), None
    )
    if ldconfig is None:
        return None
    try:
        listing = subprocess.run(
            [ldconfig, "-p"], capture_output=True, text=True, timeout=10, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    tag = ARCH_TAGS.get(platform.machine())
    names = set()
    for line in listing.splitlines():
        match = CACHE_LINE.match(line)
        if match and (tag is None or tag in match.group(2)):
            names.add(match.group(1))
    return names


def system_lookup(environ: Mapping[str, str]) -> Callable[[str], bool] | None:
    """Is a soname in the linker's cache or in a folder of LD_LIBRARY_PATH? None when the
    cache cannot be read."""
    cache = linker_cache()
    if cache is None:
        return None
    folders = [Path(p) for p in environ.get("LD_LIBRARY_PATH", "").split(":") if p]

    def present(soname: str) -> bool:
        return soname in cache or any((folder / soname).exists() for folder in folders)

    return present


def missing_libraries(present: Callable[[str], bool]) -> list[str]:
    """The sonames of `XCB_LIBRARIES` that `present` does not find."""
    return [soname for soname in XCB_LIBRARIES if not present(soname)]


def install_line(sonames: Iterable[str], root: bool) -> str:
    """The one apt-get command that installs the packages of `sonames`."""
    packages = list(dict.fromkeys(XCB_LIBRARIES[soname] for soname in sonames))
    return ("" if root else "sudo ") + "apt-get install -y " + " ".join(packages)


def problem(
    environ: Mapping[str, str] | None = None,
    qt_args: Iterable[str] = (),
    lookup: Callable[[str], bool] | None = None,
) -> str:
    """One line saying why the window cannot open on this system's xcb platform, '' when it
    can (or when this is not known: another platform, no `ldconfig`). `lookup` tells whether
    a soname is present (default: the linker's cache and LD_LIBRARY_PATH)."""
    environ = os.environ if environ is None else environ
    qt_args = list(qt_args)
    if not uses_xcb(environ, qt_args):
        return ""
    present = lookup if lookup is not None else system_lookup(environ)
    if present is not None:
        missing = missing_libraries(present)
        if missing:
            root = hasattr(os, "geteuid") and os.geteuid() == 0
            return (
                f"the window needs {', '.join(missing)} (Qt's xcb platform plugin loads "
                f"them), which this system lacks; install them with: "
                f"{install_line(missing, root)}"
            )
    if not environ.get("DISPLAY") and not {"-display", "--display"} & set(qt_args):
        return (
            "no display to open the window on (DISPLAY is not set): run it in a desktop "
            "session, under xvfb-run, or with QT_QPA_PLATFORM=offscreen"
        )
    return ""


def main(argv: list[str] | None = None) -> int:
    """Print the problem (if any) on stderr; exit status 2 with one, 0 without."""
    line = problem(qt_args=sys.argv[1:] if argv is None else argv)
    if line:
        print(f"specdec-gui: {line}", file=sys.stderr)
        return EXIT_CODE
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
