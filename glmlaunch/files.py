"""The one way glmlaunch writes an output file (``hw --save``, ``plan --svg``, ``-o``, calibration records,
and by :func:`append_text` the files it appends to: ``watch --readings``).

:func:`write_text` writes a temporary file in the target's directory, fsyncs it and ``os.replace``-s it over
the target, so a reader sees the old file or the new one, never half of one. It writes only to a regular
file or a new path:

* a device, FIFO, socket or directory is refused (:class:`~glmlaunch.errors.ConfigError`, exit 2): an
  atomic rename would replace ``/dev/full`` or a pipe with a regular file, and writing into one is not a
  file at all;
* a symbolic link is refused too, naming its target: replacing the link would silently break it, and
  writing through it lets whoever planted the link choose the file (``/tmp/x -> /etc/...`` as root). Only
  the last component is checked; a parent directory reached through a link is fine;
* a name that starts with ``-`` is refused: ``--svg --json`` took ``--json`` as the file (write ``./-x``);
* a missing parent directory, an unwritable one (``/proc/x``) or a full disk is a one-line error naming the
  option, the path and the reason, never a traceback.

What glmlaunch generates into a file it writes (the comment header of an imported profile or a calibrated
overlay) is built by :func:`comment_header`: every line through :func:`glmlaunch.output.header_text`, so a
file name, a ``--set`` value or a stored log name can add neither a line of YAML nor a secret. An existing
file is replaced only when the caller was told to (:func:`refuse_existing`: ``--force``).

Only :mod:`glmlaunch.errors` and :mod:`glmlaunch.output` are imported: every stage may use this module.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

from glmlaunch.errors import ConfigError

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
)


def _refuse(message: str, key: str | None, path: Path, hint: str | None = None) -> ConfigError:
    return ConfigError(message, key=key, value=str(path), hint=hint)


def _why(exc: OSError) -> str:
    return exc.strerror or errno.errorcode.get(exc.errno or 0, "") or str(exc)


def check_writable_target(path: str | os.PathLike[str], *, key: str | None = None) -> Path:
    """``path`` if :func:`write_text` may write it (a regular file or a new name), else a ConfigError.

    Call it before expensive work so a bad ``--svg`` / ``--save`` fails first; :func:`write_text` checks
    again.
    """
    target = Path(path)
    if os.fspath(path) == "" or target.name in ("", ".", ".."):
        raise _refuse("not a file name", key, target, "name a file, e.g. out.json")
    if os.fspath(path).startswith("-"):
        # `--svg --json` takes "--json" as the file name: always a slip, never a wish.
        hint = f"write ./{os.fspath(path)} to mean that file"
        raise _refuse("looks like an option, not a file name", key, target, hint)
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return target
    except OSError as exc:
        raise _refuse(f"cannot inspect the output path: {_why(exc)}", key, target) from None
    if stat.S_ISLNK(st.st_mode):
        try:
            real = os.path.realpath(target)
        except OSError:  # a loop, or an unreadable component
            real = "?"
        raise _refuse(
            f"is a symbolic link (to {real}); glmlaunch does not write through or replace links",
            key,
            target,
            "write to the link's target directly, or remove the link",
        )
    if stat.S_ISREG(st.st_mode):
        return target
    for test, kind in _KINDS:
        if test(st.st_mode):
            raise _refuse(f"is {kind}, not a regular file", key, target, "name a regular file or a new path")
    raise _refuse("is not a regular file", key, target, "name a regular file or a new path")


def write_text(
    path: str | os.PathLike[str],
    text: str,
    *,
    key: str | None = None,
    make_parents: bool = False,
    encoding: str = "utf-8",
    mode: int = 0o666,
) -> Path:
    """Write ``text`` to ``path`` atomically; only a regular file or a new path (see the module docstring).

    ``key`` names the option in errors (``--svg``). ``make_parents`` creates missing parent directories;
    without it a missing directory is an error. A new file gets ``mode`` less the umask (0666: the usual;
    0600 for a file only its owner may read); a replaced file keeps its permission bits, never wider than
    ``mode``. Text that cannot be encoded (lone surrogates from a file name
    that is not valid UTF-8) is written as the original bytes.
    """
    target = check_writable_target(path, key=key)
    parent = target.parent
    try:
        data = text.encode(encoding, "surrogateescape")
    except UnicodeEncodeError:
        data = text.encode(encoding, "backslashreplace")
    if make_parents:
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _refuse(f"cannot create the directory {parent}: {_why(exc)}", key, target) from None
    if not parent.is_dir():
        missing = not parent.exists()
        raise _refuse(
            f"the directory {parent} does not exist" if missing else f"{parent} is not a directory",
            key,
            target,
            "create the directory first",
        )
    tmp, fd = _create_temp(parent, target, key, mode)
    try:
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                try:
                    old = os.stat(target, follow_symlinks=False)
                    if stat.S_ISREG(old.st_mode):
                        os.fchmod(handle.fileno(), stat.S_IMODE(old.st_mode) & mode)
                except FileNotFoundError:
                    pass
                os.fsync(handle.fileno())
            # Checked again just before the rename: the narrowest window for a swap we can give.
            check_writable_target(target, key=key)
            os.replace(tmp, target)
        except OSError as exc:
            raise _refuse(f"cannot write the file: {_why(exc)}", key, target) from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(parent)
    return target


def append_text(
    path: str | os.PathLike[str], text: str, *, key: str | None = None, mode: int = 0o600
) -> Path:
    """Append ``text`` to ``path`` (a log glmlaunch keeps adding to: ``watch --readings``), by the same
    rule as :func:`write_text`: a regular file or a new path only, never through a link, never into a
    FIFO, socket or device (opened without blocking, then checked again on the open file, so a path
    swapped in between is refused too). A new file gets ``mode`` (0600: a reading names the deployment's
    GPUs) less the umask."""
    target = check_writable_target(path, key=key)
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
    flags |= getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(target, flags, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link put there since the check
            check_writable_target(target, key=key)
        if exc.errno == errno.ENXIO:  # a FIFO without a reader
            raise _refuse("is a FIFO (named pipe), not a regular file", key, target) from None
        raise _refuse(f"cannot append to the file: {_why(exc)}", key, target) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = next((k for test, k in _KINDS if test(st.st_mode)), "not a regular file")
            raise _refuse(f"is {kind}, not a regular file", key, target, "name a regular file or a new path")
        data = text.encode("utf-8", "surrogateescape")
        while data:
            data = data[os.write(fd, data) :]
    except OSError as exc:
        raise _refuse(f"cannot append to the file: {_why(exc)}", key, target) from None
    finally:
        os.close(fd)
    return target


def _create_temp(parent: Path, target: Path, key: str | None, mode: int) -> tuple[Path, int]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(16):
        tmp = parent / f".{target.name[:200]}.{secrets.token_hex(6)}.tmp"
        try:
            return tmp, os.open(tmp, flags, mode)
        except FileExistsError:
            continue
        except OSError as exc:
            raise _refuse(f"cannot write in {parent}: {_why(exc)}", key, target) from None
    raise _refuse(f"cannot create a temporary file in {parent}", key, target)


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable where the platform allows it (best effort)."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def comment_header(lines: list[str]) -> str:
    """``# line`` for each line, each masked and escaped to one line (module docstring), ending in a
    newline: the only way glmlaunch writes text of its own choosing above the data of a file."""
    from glmlaunch.output import header_text

    return "".join(f"# {header_text(line)}\n" for line in lines)


def refuse_existing(path: str | os.PathLike[str], *, key: str, force: bool) -> None:
    """One rule for every output file: an existing one is replaced only with ``--force``."""
    if not force and os.path.lexists(path):
        raise ConfigError(
            "the output file exists", key=key, value=os.fspath(path), hint="pass --force to overwrite it"
        )


def xml_text(text: str) -> str:
    """Text for a generated XML/SVG file (``plan --svg``): escaped by :func:`glmlaunch.output.escape` first
    (XML 1.0 cannot hold most control characters, and a name must not start a line), then XML-escaped."""
    from xml.sax.saxutils import escape as xml_escape

    from glmlaunch.output import escape

    return xml_escape(escape(text))
