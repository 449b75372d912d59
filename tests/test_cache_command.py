"""`mdlc cache`: what the build cache holds, and removing what builds no longer use
(codegen/compile/cache_entries.py; docs/build.md). Nothing in the cache expired, so it
only grew: the suite's own cache holds 2.6 GiB after a day of work."""
from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from codegen import cli, load
from codegen.compile import cache, cache_entries
from codegen.compile.environment import EXT_SUFFIX

DAY = 86400
GOOD = "model Twice() {\n  input x : f32[N]\n  output y = x * 2.0\n}\n"


def entry(root: Path, kind: str, name: str, size: int, age_days: float) -> Path:
    """A cache entry as builds leave them: a key directory (or failed-KEY), its key.json,
    a product of `size` bytes and an index entry naming a module; last used `age_days` ago."""
    key = uuid.uuid4().hex
    directory = root / (f"failed-{key}" if kind == "failed" else key)
    directory.mkdir(parents=True)
    product = "module" if kind in ("module", "failed") else name
    cache.write_key(directory, {"product": product, "module": name})
    built = directory / (f"{name}.so" if product == "module" else "mdl_runtime.o")
    built.write_bytes(os.urandom(size))
    (root / "locks").mkdir(exist_ok=True)
    (root / "locks" / f"{key}.lock").touch()
    if kind == "module":
        (root / "index").mkdir(exist_ok=True)
        (root / "index" / uuid.uuid4().hex).write_text(json.dumps({"built": str(built),
                                                                   "toolchain": "host"}))
    when = time.time() - age_days * DAY
    os.utime(directory, (when, when))
    return directory


def mdlc_cache(monkeypatch, capsys, root: Path, *args: str) -> tuple[int, str, str]:
    monkeypatch.setenv("MDL_CACHE_DIR", str(root))
    code = cli.main(["cache", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def filled(tmp_path):
    """A cache of two modules (one unused for 40 days), a runtime and a failed build."""
    root = tmp_path / "cache"
    return root, {"old": entry(root, "module", "old_model", 300_000, 40),
                  "new": entry(root, "module", "new_model", 200_000, 0.1),
                  "runtime": entry(root, "runtime", "runtime", 600_000, 2),
                  "failed": entry(root, "failed", "broken", 10_000, 35)}


def test_info_says_where_the_cache_is_and_what_it_holds(filled, monkeypatch, capsys):
    root, _ = filled
    code, out, _ = mdlc_cache(monkeypatch, capsys, root)
    assert code == 0
    assert f"the build cache {root} ($MDL_CACHE_DIR):" in out
    lines = {line.split()[1]: line for line in out.splitlines()[1:4]}
    assert lines.keys() == {"modules", "runtime", "failed"}
    count, _, size, unit = lines["modules"].split()
    assert count == "2" and unit == "KiB" and 488 <= float(size) < 600  # 500 KB, on disk
    assert "2 index entries" in out
    assert "the least recently 40 days ago, the most recently 2 hours ago" in out


def test_list_shows_an_entry_a_line_least_recently_used_first(filled, monkeypatch, capsys):
    root, made = filled
    code, out, _ = mdlc_cache(monkeypatch, capsys, root, "list")
    assert code == 0
    names = [line.split()[-1] for line in out.splitlines()]
    assert names == [made[k].name for k in ("old", "failed", "runtime", "new")]
    assert "module" in out.splitlines()[0] and "old_model" in out.splitlines()[0]


def test_an_empty_or_missing_cache_says_so(tmp_path, monkeypatch, capsys):
    code, out, _ = mdlc_cache(monkeypatch, capsys, tmp_path / "none")
    assert (code, out) == (0, f"the build cache {tmp_path / 'none'} ($MDL_CACHE_DIR) is empty\n")
    code, out, _ = mdlc_cache(monkeypatch, capsys, tmp_path / "none", "prune")
    assert code == 0 and "removed 0 entries" in out


@pytest.mark.parametrize("action", [(), ("list",), ("clear",), ("prune",)])
def test_a_cache_that_is_a_file_is_a_usage_error(tmp_path, monkeypatch, capsys, action):
    """It said "is empty"; then said so and exited 0, and `clear` "removed 0 entries"."""
    (tmp_path / "file").write_text("")
    code, out, err = mdlc_cache(monkeypatch, capsys, tmp_path / "file", *action)
    assert (code, out) == (2, "")
    assert err == (f"mdlc: error: the build cache {tmp_path / 'file'} ($MDL_CACHE_DIR) is a "
                   "file, not a directory\n")
    # QA: a cache under the file was said to be "empty", exit 0
    code, out, err = mdlc_cache(monkeypatch, capsys, tmp_path / "file" / "sub", *action)
    assert (code, out) == (2, "")
    assert err == (f"mdlc: error: the build cache {tmp_path / 'file' / 'sub'} ($MDL_CACHE_DIR) "
                   f"lies under {tmp_path / 'file'}, which is a file, not a directory\n")


def test_prune_removes_what_no_build_used_for_30_days_with_its_index_and_lock(
        filled, monkeypatch, capsys):
    root, made = filled
    stray = root / "notes.txt"  # not the cache's: never touched
    stray.write_text("mine")
    # QA: the dry run counted no index entry and no lock file the run then removed
    code, out, _ = mdlc_cache(monkeypatch, capsys, root, "prune", "--dry-run")
    assert code == 0 and "would remove 2 entries" in out
    assert "1 index entry and 2 lock files" in out and made["old"].exists()
    code, out, _ = mdlc_cache(monkeypatch, capsys, root, "prune")
    assert code == 0
    assert not made["old"].exists() and not made["failed"].exists()
    assert made["new"].is_dir() and made["runtime"].is_dir() and stray.is_file()
    assert "removed module old_model" in out and "removed failed build broken" in out
    assert "removed 2 entries" in out and "1 index entry and 2 lock files" in out
    assert sorted(p.stem for p in (root / "locks").iterdir()) == sorted(
        [made["new"].name, made["runtime"].name])
    [kept] = (root / "index").iterdir()
    assert json.loads(kept.read_text())["built"].startswith(str(made["new"]))
    assert not list(root.glob("tmp-*"))


def test_older_than_takes_days(filled, monkeypatch, capsys):
    root, made = filled
    mdlc_cache(monkeypatch, capsys, root, "prune", "--older-than", "1.5")
    assert [p for p in made.values() if p.exists()] == [made["new"]]


def test_max_size_removes_the_least_recently_used_until_the_rest_fit(filled, monkeypatch,
                                                                     capsys):
    root, made = filled
    code, out, _ = mdlc_cache(monkeypatch, capsys, root, "prune", "--max-size", "700K")
    assert code == 0
    # oldest first: old (300 KB) and failed go, then the runtime (600 KB): 200 KB left
    assert [p for p in made.values() if p.exists()] == [made["new"]]
    code, out, _ = mdlc_cache(monkeypatch, capsys, root, "prune", "--max-size", "1G")
    assert "removed 0 entries" in out and made["new"].is_dir()


def test_dry_run_and_clear(filled, monkeypatch, capsys):
    root, made = filled
    code, out, _ = mdlc_cache(monkeypatch, capsys, root, "clear", "--dry-run")
    assert code == 0 and "would remove 4 entries" in out
    assert all(p.is_dir() for p in made.values())
    code, out, _ = mdlc_cache(monkeypatch, capsys, root, "clear")
    assert code == 0 and not any(p.exists() for p in made.values())
    assert not list((root / "index").iterdir()) and not list((root / "locks").iterdir())


def test_an_entry_a_build_holds_stays(filled, monkeypatch, capsys):
    root, made = filled
    handle = cache.take_lock(cache.lock_path(root, made["old"].name), fcntl.LOCK_EX)
    with handle:
        code, out, _ = mdlc_cache(monkeypatch, capsys, root, "prune")
    assert code == 0 and made["old"].is_dir() and not made["failed"].exists()
    assert f"kept module old_model: a build is using it ({made['old'].name})" in out


def test_a_runtime_read_by_a_build_stays(filled, monkeypatch, capsys):
    """A module's build reads the runtime's object and header for seconds after finding
    it (cache.reading): a prune then keeps it; one removed before the lock is found again."""
    root, made = filled
    monkeypatch.setenv("MDL_CACHE_DIR", str(root))
    runtime = made["runtime"] / "mdl_runtime.o"
    gone = root / uuid.uuid4().hex / "mdl_runtime.o"
    offered = [gone, runtime]
    with cache.reading(lambda: offered.pop(0), lambda found: [found]) as found:
        assert found == runtime and not offered
        chosen = [e for e in cache_entries.entries(root) if e.path == made["runtime"]]
        pruned = cache_entries.remove(root, chosen)
        assert pruned.in_use == chosen and runtime.is_file()
    assert cache_entries.remove(root, chosen).removed == chosen


def test_usage_errors(filled, monkeypatch, capsys):
    root, _ = filled
    # the hint "(and --dry-run for `clear`)" was glued to every option's
    for args, said in [(["list", "--older-than", "3"],
                        "--older-than is for `mdlc cache prune`, not `list`"),
                       (["info", "--dry-run"],
                        "--dry-run is for `mdlc cache prune` and `clear`, not `info`"),
                       (["clear", "--max-size", "1G"], "`clear` removes every entry")]:
        code, _, err = mdlc_cache(monkeypatch, capsys, root, *args)
        assert code == 2 and said in err
    for args in (["prune", "--max-size", "2X"], ["prune", "--older-than", "-1"],
                 ["prune", "--older-than", "nan"], ["tidy"]):
        with pytest.raises(SystemExit) as exited:
            mdlc_cache(monkeypatch, capsys, root, *args)
        assert exited.value.code == 2


def test_a_lock_file_removed_while_held_is_opened_again(tmp_path):
    """A prune removes a key's lock file while holding it; a process that opened the old
    file and waited on it would lock a file nobody else opens, so it opens the path again."""
    path = tmp_path / "locks" / "k.lock"
    held = cache.take_lock(path, fcntl.LOCK_EX)
    got = []
    waiter = threading.Thread(target=lambda: got.append(cache.take_lock(path, fcntl.LOCK_EX)))
    waiter.start()
    time.sleep(0.3)
    path.unlink()
    held.close()
    waiter.join(10)
    [handle] = got
    assert os.path.samestat(os.fstat(handle.fileno()), os.stat(path))
    assert cache.take_lock(path, fcntl.LOCK_EX, wait=False) is None
    handle.close()


def test_a_build_or_import_that_finds_an_entry_marks_it_used(tmp_path, monkeypatch, capsys):
    """Entries go by when builds last found them, not when they were made: a module used
    every day is never pruned for its age."""
    source = tmp_path / "twice.mdl"
    source.write_text(GOOD)
    name = f"twice_{uuid.uuid4().hex[:8]}"
    module = load(source, name=name)
    directory = Path(module.__file__).parent
    os.utime(directory, (0, 0))
    load(source, name=name)                      # the cache's hit in a process
    assert time.time() - directory.stat().st_mtime < 600
    os.utime(directory, (0, 0))
    assert cli.main(["build", str(source), "--name", name, "-o", str(tmp_path)]) == 0
    assert time.time() - directory.stat().st_mtime < 600    # the index's hit
    capsys.readouterr()


def test_a_pruned_module_is_built_again(tmp_path):
    source = tmp_path / "twice.mdl"
    source.write_text(GOOD)
    name = f"twice_{uuid.uuid4().hex[:8]}"
    assert cli.main(["build", str(source), "--name", name, "-o", str(tmp_path)]) == 0
    root = cache.cache_dir()
    [built] = [e for e in cache_entries.entries(root) if e.name == name]
    pruned = cache_entries.remove(root, [built])
    assert pruned.removed == [built] and not built.path.exists()
    assert pruned.index_entries >= 1   # the index's entry of it is gone with it
    (tmp_path / f"{name}{EXT_SUFFIX}").unlink()
    assert cli.main(["build", str(source), "--name", name, "-o", str(tmp_path)]) == 0
    assert built.path.is_dir()
    run = subprocess.run([sys.executable, "-c", f"import numpy as np, {name}; print({name}"
                          ".Twice(seed=0).forward(x=np.ones(3, np.float32))['y'])"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "[2. 2. 2.]", run.stderr


def _built_once(tmp_path: Path):
    """GOOD built by `mdlc build -o` under a name of its own: its source, name, output
    folder, the cache's root and the cache's entry of it."""
    source = tmp_path / "twice.mdl"
    source.write_text(GOOD)
    name = f"twice_{uuid.uuid4().hex[:8]}"
    out = tmp_path / "out"
    assert cli.main(["build", str(source), "--name", name, "-o", str(out)]) == 0
    root = cache.cache_dir()
    [built] = [e for e in cache_entries.entries(root) if e.name == name]
    return source, name, out, root, built


def test_a_module_being_copied_or_imported_stays(tmp_path, monkeypatch, capsys):
    """`mdlc build -o` copies the module it found and `load` imports it: a prune between
    the finding and the copy made `mdlc build` fail (`cannot write
    `<cache>/<key>/m.so`: No such file or directory`, exit 2). Both hold the entry's key
    (cache.reading): a prune then keeps it."""
    from codegen.compile import extension
    source, name, out, root, built = _built_once(tmp_path)
    kept = []

    def prune_first(copy):
        def pruned(*args, **kwargs):
            kept.append(cache_entries.remove(root, [built]).in_use)
            return copy(*args, **kwargs)
        return pruned
    monkeypatch.setattr(extension, "install", prune_first(extension.install))
    assert cli.main(["build", str(source), "--name", name, "-o", str(out)]) == 0
    import importlib.util
    monkeypatch.setattr(importlib.util, "module_from_spec",
                        prune_first(importlib.util.module_from_spec))
    assert load(source, name=name).__file__ == str(built.path / f"{name}{EXT_SUFFIX}")
    assert kept == [[built], [built]] and built.path.is_dir()
    capsys.readouterr()


def test_a_module_pruned_before_its_copy_is_built_again(tmp_path, monkeypatch, capsys):
    """A prune that removes the entry before the build takes its key: the build finds it
    gone and builds it again (cache.reading), not an error about the cache's path."""
    from codegen.compile import index
    source, name, out, root, built = _built_once(tmp_path)
    lookup = index.lookup
    found = []

    def then_pruned(*args, **kwargs):
        path = lookup(*args, **kwargs)
        found.append(path)
        if len(found) == 1:
            assert cache_entries.remove(root, [built]).removed == [built]
        return path
    monkeypatch.setattr(index, "lookup", then_pruned)
    (out / f"{name}{EXT_SUFFIX}").unlink()
    assert cli.main(["build", str(source), "--name", name, "-o", str(out)]) == 0
    assert found[0] is not None and found[1] is None   # found, then gone: built again
    assert (out / f"{name}{EXT_SUFFIX}").is_file() and built.path.is_dir()
    capsys.readouterr()


def test_a_dry_run_of_a_cache_that_takes_no_lock_says_what_would_go(filled, monkeypatch,
                                                                     capsys):
    """A dry run changes nothing, yet on a read-only cache (its lock files cannot be
    made) it failed as the prune itself does: `cannot change the build cache`, exit 2."""
    root, made = filled

    def read_only(*args, **kwargs):
        raise OSError(30, "Read-only file system", str(root / "locks"))
    monkeypatch.setattr(cache_entries, "take_lock", read_only)
    code, out, _ = mdlc_cache(monkeypatch, capsys, root, "clear", "--dry-run")
    assert code == 0 and "would remove 4 entries" in out
    assert all(p.is_dir() for p in made.values())
    code, _, err = mdlc_cache(monkeypatch, capsys, root, "prune")
    assert code == 2 and "cannot change the build cache" in err
