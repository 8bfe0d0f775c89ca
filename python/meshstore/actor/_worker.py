"""A worker process of ``this_host().spawn_procs(...)``: loads what the
controller's pickled classes need (its sys.path, and its main script as
``__mp_main__``, as multiprocessing's spawn does), runs the bootstrap,
then serves the controller through the C++ worker loop
(``ProcMesh::serve``) until it stops or goes away."""

import json
import os
import pickle
import sys
import types


def _load_main(path):
    # The controller's script, without what its `if __name__ == "__main__"`
    # guards: its classes then unpickle as __main__.X here.
    module = types.ModuleType("__mp_main__")
    module.__file__ = path
    sys.modules["__mp_main__"] = module
    with open(path, encoding="utf-8") as f:
        code = compile(f.read(), path, "exec")
    exec(code, module.__dict__)  # noqa: S102 (the controller's own script)
    sys.modules["__main__"] = module


def main():
    for p in reversed(json.loads(os.environ.get("MESHSTORE_ACTOR_SYSPATH", "[]"))):
        if p not in sys.path:
            sys.path.insert(0, p)
    main_path = os.environ.get("MESHSTORE_ACTOR_MAIN")
    if main_path:
        _load_main(main_path)
    bootstrap = os.environ.get("MESHSTORE_ACTOR_BOOTSTRAP")
    if bootstrap:
        pickle.loads(bytes.fromhex(bootstrap))()
    from meshstore import _native
    from meshstore.actor import _runtime
    _runtime.in_worker = True
    try:
        _native.serve_procs()
    finally:
        _runtime.stop_loop()  # before the interpreter finalizes (see stop_loop)


if __name__ == "__main__":
    sys.exit(main())
