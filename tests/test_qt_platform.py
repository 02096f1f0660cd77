"""Before the window opens on X11, a system without the libraries Qt's xcb platform plugin
loads gets one line naming them and the apt-get command that installs them, exit status 2,
instead of Qt's abort; another platform (offscreen, wayland) is not checked. The library
lookup is replaced here, so the tests hold whatever this machine has installed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app import qt_platform
from app.qt_platform import XCB_LIBRARIES, problem

ROOT = Path(__file__).resolve().parents[1]
X11 = {"DISPLAY": ":0"}


def lacking(*sonames: str):
    return lambda soname: soname not in sonames


def never(soname: str) -> bool:
    raise AssertionError("looked up a library for a platform that is not xcb")


def no_window(*args) -> None:
    raise AssertionError("the window was started")


def test_missing_libraries_are_one_line_with_the_apt_get_command():
    line = problem(X11, lookup=lacking("libxcb-cursor.so.0", "libxcb-icccm.so.4"))
    assert "\n" not in line
    assert "libxcb-cursor.so.0, libxcb-icccm.so.4" in line
    assert line.endswith("apt-get install -y libxcb-cursor0 libxcb-icccm4")


def test_each_package_is_named_once():
    line = problem(X11, lookup=lacking("libglib-2.0.so.0", "libgthread-2.0.so.0"))
    assert line.endswith("apt-get install -y libglib2.0-0")


def test_nothing_is_said_when_every_library_is_there():
    assert problem(X11, lookup=lambda soname: True) == ""


@pytest.mark.parametrize(
    ("environ", "args"),
    [
        ({"QT_QPA_PLATFORM": "offscreen"}, []),
        ({"QT_QPA_PLATFORM": "wayland", **X11}, []),
        ({"QT_QPA_PLATFORM": "wayland;xcb", **X11}, []),  # xcb only if wayland fails
        ({"QT_QPA_PLATFORM": "xcb", **X11}, ["-platform", "offscreen"]),  # the argument wins
        ({"WAYLAND_DISPLAY": "wayland-0", **X11}, []),  # a Wayland session: Qt uses wayland
    ],
)
def test_another_platform_is_not_checked(environ, args):
    assert problem(environ, args, lookup=never) == ""


@pytest.mark.parametrize(
    ("environ", "args"),
    [
        (X11, []),
        ({"QT_QPA_PLATFORM": "xcb", **X11}, []),
        ({"QT_QPA_PLATFORM": "xcb:nograb;wayland", **X11}, []),
        ({"QT_QPA_PLATFORM": "offscreen", **X11}, ["-platform", "xcb"]),
        ({"WAYLAND_DISPLAY": "wayland-0", "QT_QPA_PLATFORM": "xcb", **X11}, []),
        ({}, []),  # no display at all: the libraries are still needed
    ],
)
def test_xcb_is_checked(environ, args):
    assert "apt-get install -y libxcb-keysyms1" in problem(
        environ, args, lookup=lacking("libxcb-keysyms.so.1")
    )


def test_without_a_display_the_line_says_so():
    line = problem({}, lookup=lambda soname: True)
    assert "DISPLAY" in line and "QT_QPA_PLATFORM=offscreen" in line and "\n" not in line
    assert problem({}, ["-display", ":1"], lookup=lambda soname: True) == ""


def test_the_gui_prints_it_and_exits_with_2_before_qt_starts(monkeypatch, capsys):
    from app import main

    monkeypatch.setenv("QT_QPA_PLATFORM", "xcb")
    monkeypatch.setenv("DISPLAY", ":0")
    monkeypatch.setattr(qt_platform, "system_lookup", lambda environ: lacking("libxcb.so.1"))
    monkeypatch.setattr(main, "make_engine", no_window)
    assert main.main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specdec-gui: ") and err.count("\n") == 1
    assert "apt-get install -y libxcb1" in err


def test_playground_gui_says_it_before_its_setup(tmp_path):
    """`./playground gui` without a display: one line and status 2, before any setup (run
    on a copy of the script, so that nothing is installed here whatever happens)."""
    for name in ("playground", "app/__init__.py", "app/qt_platform.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tmp_path / name)
    display = ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")
    environ = {key: value for key, value in os.environ.items() if key not in display}
    done = subprocess.run(
        [str(tmp_path / "playground"), "gui"],
        env=environ, capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("specdec-gui: ") and done.stderr.count("\n") == 1
    assert not (tmp_path / ".venv").exists()


def test_the_linker_cache_is_read():
    cache = qt_platform.linker_cache()
    if cache is None:
        pytest.skip("no ldconfig here")
    assert any(name.startswith("libc.so.") for name in cache)


def test_the_table_has_every_x11_library_the_installed_plugin_loads():
    import PySide6

    qt = Path(PySide6.__file__).parent / "Qt"
    plugin = qt / "plugins" / "platforms" / "libqxcb.so"
    if not sys.platform.startswith("linux") or not plugin.is_file() or not shutil.which("ldd"):
        pytest.skip("needs PySide6's xcb plugin and ldd")
    listing = subprocess.run(["ldd", str(plugin)], capture_output=True, text=True).stdout
    system = set()
    for name, where in re.findall(r"^\s*(\S+) => (.+?)(?: \(0x[0-9a-f]+\))?$", listing, re.M):
        if where == "not found" or not where.startswith(str(qt.parent)):
            system.add(name)
    x11 = {name for name in system if re.match(r"lib(xcb|X11|xkbcommon)", name)}
    assert x11 and x11 <= set(XCB_LIBRARIES), x11 - set(XCB_LIBRARIES)
    not_found = set(re.findall(r"^\s*(\S+) => not found", listing, re.M))
    assert not_found <= set(XCB_LIBRARIES)
