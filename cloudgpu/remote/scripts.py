"""The instance-side scripts (sync agent, puller, pusher) as one ``python3 -c`` program.

The puller and the pusher share cloudgpu.remote.objwire (the pusher has its scan in
pushscan); the sync agent is made of syncwire and syncdest, which the client runs on its
own end too. On the instance there
is no cloudgpu to import from, so :func:`source` wraps the modules' own source texts in a
short loader that registers each one under its real module name before running the
script's ``main``: the files import each other exactly as they do here, and what runs
on the instance is the code the tests run. The loader defines only ``cloudgpu``,
``cloudgpu.remote`` and the shipped modules (never a real package), so nothing else of
this machine's Python can be imported by accident.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
# Each program's modules besides its main one, in import order.
PROGRAMS: dict[str, tuple[str, ...]] = {
    "agent": ("syncwire", "syncdest"),
    "puller": ("objwire",),
    "pusher": ("objwire", "pushscan"),
}
MAX_SOURCE = 120_000  # one argv string: Linux refuses one over 128 KiB (MAX_ARG_STRLEN)

_LOADER = """\
import sys, types
for _p in ("cloudgpu", "cloudgpu.remote"):
    _m = types.ModuleType(_p)
    _m.__path__ = []
    sys.modules[_p] = _m
def _load(_name, _src):
    _m = types.ModuleType(_name)
    _m.__file__ = "<cloudgpu " + _name + ">"
    sys.modules[_name] = _m
    exec(compile(_src, _m.__file__, "exec"), _m.__dict__)
    return _m
"""


def source(main_module: str) -> str:
    """The program running ``cloudgpu.remote.<main_module>.main(sys.argv[1:])``, with the
    modules it imports (:data:`PROGRAMS`) loaded before it."""
    parts = [_LOADER]
    for name in (*PROGRAMS[main_module], main_module):
        text = (HERE / f"{name}.py").read_text(encoding="utf-8")
        parts.append(f"_last = _load({f'cloudgpu.remote.{name}'!r}, {text!r})\n")
    parts.append("sys.exit(_last.main(sys.argv[1:]))\n")
    program = "".join(parts)
    if len(program.encode()) > MAX_SOURCE:
        raise AssertionError(f"{main_module}: instance script too large for one argument")
    return program
