// Checkpoint files: written atomically, read in full, through NumPy's .npz format.
// Defined inline, and so compiled in python_module.cpp's unit, the only one that includes
// it (through checkpoint.h): in a unit of their own these two functions parsed and
// instantiated pybind11 again, 13 s of the runtime's build (docs/build.md).
#pragma once

#include <pybind11/pybind11.h>

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace mdl {

namespace py = pybind11;

// A KeyboardInterrupt (Ctrl-C, raised in the Python code a step runs) or SystemExit (what a
// SIGINT handler of the user's raised) rather than a failure: a best-effort step passes
// over its failures and lets these go on to the caller. Once swallowed there, a training
// loop saving every 10 steps ran on after 5 of 15 Ctrl-Cs.
inline bool interrupted(py::error_already_set& e) { return !e.matches(PyExc_Exception); }

// A checkpoint's path as its errors name it: a str, bytes or path-like as the file system
// spells it (os.fsencode), a byte that is not UTF-8 written \xff. A str from os.listdir of
// such a name (a surrogate, PEP 383) made load() raise UnicodeEncodeError before reading.
inline std::string shown_path(py::handle path) {
  py::module_ os = py::module_::import("os");
  py::object name = os.attr("fsencode")(os.attr("fspath")(path));
  return py::cast<std::string>(name.attr("decode")("utf-8", "backslashreplace"));
}

// The temporary files of saves to `base` in `dir` by processes that ended without removing
// them (SIGKILL, a power cut), each as large as a checkpoint: `.BASE.PID.<random>.tmp`
// whose PID runs no more. Best effort: a file it cannot judge or remove stays.
inline void sweep_abandoned_saves(py::module_& os, py::object dir, py::object base) {
  try {
    py::module_ glob = py::module_::import("glob");
    py::str prefix = py::str(".{}.").format(base);
    py::object pattern = os.attr("path").attr("join")(
        glob.attr("escape")(dir), py::str("{}*.tmp").format(glob.attr("escape")(prefix)));
    const std::size_t skip = py::len(prefix);
    for (py::handle name : glob.attr("glob")(pattern)) {
      std::string rest = py::cast<std::string>(os.attr("path").attr("basename")(name));
      rest = rest.substr(skip);
      const std::size_t dot = rest.find('.');
      if (dot == 0 || dot == std::string::npos || dot > 9 ||
          rest.find_first_not_of("0123456789") != dot)
        continue;  // not a PID: an older mdl's name, or not ours
      const pid_t pid = static_cast<pid_t>(std::stol(rest.substr(0, dot)));
      if (pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH) continue;  // it runs
      os.attr("unlink")(name);
    }
  } catch (py::error_already_set& e) {  // a name it cannot read (bytes), a file gone since
    if (interrupted(e)) throw;
  } catch (std::exception&) {
  }
}

// Writes `arrays` to `path` so that a crash leaves either the old file or the new one: into
// a temporary file in the same directory, flushed to disk, then renamed over `path`. The
// temporary file's name holds this process's id, so that a later save can tell one whose
// process was killed (sweep_abandoned_saves).
// A symbolic link's target is written (the link stays a link); a path that is there and
// no regular file (a device, a pipe), which the rename would replace, is refused.
inline void write_npz(py::handle path, const py::dict& arrays) {
  py::module_ os = py::module_::import("os"), np = py::module_::import("numpy");
  py::object os_path = os.attr("path");
  // bytes too (os.fsdecode): the temporary file's name is a str
  py::object given = os.attr("fsdecode")(os.attr("fspath")(path));
  py::object full = os_path.attr("realpath")(given);
  py::object dir = os_path.attr("dirname")(full);
  py::object base = os_path.attr("basename")(full);
  // errors name what the caller gave, not the temporary file that would have failed
  py::module_ builtins = py::module_::import("builtins");
  auto refuse = [&](const char* type, int number, const std::string& why, py::object name) {
    // OSError(errno, ...) makes the subclass of its errno: raised as its own type
    py::object error = builtins.attr(type)(number, why, name);
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
    throw py::error_already_set();
  };
  if (py::len(given) == 0)  // as open(""): realpath("") is the current folder, once named
    refuse("FileNotFoundError", ENOENT, "a checkpoint needs a file name, got an empty path",
           given);
  if (py::cast<bool>(os_path.attr("isdir")(full)))
    refuse("IsADirectoryError", EISDIR, "a checkpoint is a file, and this is a folder", full);
  if (!py::cast<bool>(os_path.attr("isdir")(dir)))
    refuse("FileNotFoundError", ENOENT, "no folder to write the checkpoint into", dir);
  if (py::cast<bool>(os_path.attr("exists")(full)) && !py::cast<bool>(os_path.attr("isfile")(full)))
    throw py::value_error("save(path): " + shown_path(full) + " is not a regular "
                          "file, and a checkpoint replaces the file at its path whole: give "
                          "the path of a file, or of a new one");
  // an error of the temporary file's (a folder not writable, a full disk) names the path
  auto renamed = [&](py::error_already_set& e) {
    if (!e.matches(PyExc_OSError)) return;
    py::object error = e.value();
    py::object number = error.attr("errno");
    if (number.is_none()) return;
    // OSError(errno, ...) is the subclass its errno makes (PermissionError, ...)
    refuse("OSError", py::cast<int>(number),
           py::cast<std::string>(py::str(error.attr("strerror"))), full);
  };
  // mkstemp's file is private (0600): the checkpoint keeps the old file's mode, or 0644
  int mode = 0644;
  if (py::cast<bool>(os_path.attr("exists")(full)))
    mode = py::cast<int>(os.attr("stat")(full).attr("st_mode")) & 07777;
  py::tuple made;
  try {
    made = py::module_::import("tempfile").attr("mkstemp")(
        py::arg("dir") = dir, py::arg("prefix") = py::str(".{}.{}.").format(base, getpid()),
        py::arg("suffix") = ".tmp");
  } catch (py::error_already_set& e) {
    renamed(e);
    throw;
  }
  py::object fd = made[0], temporary = made[1];
  try {
    py::object file = os.attr("fdopen")(fd, "wb");
    try {
      np.attr("savez")(file, **arrays);
      file.attr("flush")();
      os.attr("fsync")(file.attr("fileno")());
    } catch (...) {
      file.attr("close")();
      throw;
    }
    file.attr("close")();
    os.attr("chmod")(temporary, mode);
    os.attr("replace")(temporary, full);
  } catch (py::error_already_set& e) {
    try {
      os.attr("unlink")(temporary);
    } catch (py::error_already_set&) {
    }
    renamed(e);
    throw;
  } catch (...) {
    try {
      os.attr("unlink")(temporary);
    } catch (py::error_already_set&) {
    }
    throw;
  }
  // the rename itself reaches the disk with the directory's entry
  py::object dir_fd = os.attr("open")(dir, os.attr("O_RDONLY"));
  try {
    os.attr("fsync")(dir_fd);
  } catch (py::error_already_set& e) {  // some file systems cannot sync a directory
    if (interrupted(e)) {
      os.attr("close")(dir_fd);
      throw;
    }
  }
  os.attr("close")(dir_fd);
  sweep_abandoned_saves(os, dir, base);
}

// Every array of the .npz at `path`, read in full so that a damaged member shows now. A file
// that is not a readable .npz is a ValueError naming it; a missing one, FileNotFoundError.
inline py::dict read_npz(py::handle path) {
  py::module_ np = py::module_::import("numpy");
  py::object name = py::module_::import("os").attr("fspath")(path);
  py::dict out;
  // NumPy takes any other file for a pickle and says so: name the real problem instead
  py::object file = py::module_::import("io").attr("open")(name, "rb");
  py::bytes head = file.attr("read")(4);
  file.attr("close")();
  if (std::string(head) != "PK\x03\x04")
    throw py::value_error(shown_path(name) + ": not a checkpoint (" +
                          (py::len(head) ? "not an .npz archive" : "the file is empty") + ")");
  try {
    py::object archive = np.attr("load")(name, py::arg("allow_pickle") = false);
    try {
      for (py::handle key : archive.attr("files")) out[key] = archive[key];
    } catch (...) {
      archive.attr("close")();
      throw;
    }
    archive.attr("close")();
  } catch (py::error_already_set& e) {
    // a file that is not there (or not readable) is the caller's to see as it is
    // (and so are memory the machine would not give and a Ctrl-C: the file is not to blame)
    if (e.matches(PyExc_FileNotFoundError) || e.matches(PyExc_PermissionError) ||
        e.matches(PyExc_IsADirectoryError) || e.matches(PyExc_MemoryError) || interrupted(e))
      throw;
    std::string why = py::str(e.value());
    std::string type = py::str(e.type().attr("__name__"));
    throw py::value_error(shown_path(name) + ": not a readable checkpoint (" + type +
                          ": " + why + ")");
  }
  return out;
}

}  // namespace mdl
