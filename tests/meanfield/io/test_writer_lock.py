"""One writer per run file, whatever name it is given; outputs and tables that are not regular files; file systems
without locks."""
from __future__ import annotations

import os
import threading

import pytest

from meanfield.errors import ConfigError
from meanfield.io.signature import file_head, is_hdf5


def test_a_pipe_is_never_opened_to_read_its_signature(tmp_path):
    # `--csv /dev/stdout | head` and a FIFO had blocked for ever in open(): is_hdf5 read any path
    from meanfield.cli import info
    from meanfield.cli.options import table_path

    fifo = tmp_path / "t.fifo"
    os.mkfifo(fifo)
    answers: list[object] = []

    def look() -> None:
        answers.append(is_hdf5(fifo))
        answers.append(table_path(str(fifo), "--csv"))
        with pytest.raises(OSError, match="not a regular file"):
            file_head(fifo)

        def missing() -> None:
            raise ConfigError("OUT.h5", f"{fifo} is not a regular file")

        with pytest.raises(ConfigError):  # refused at once, not waited for as a run about to start
            info._when_readable(str(fifo), missing, 0.01)
        answers.append("done")

    thread = threading.Thread(target=look, daemon=True)
    thread.start()
    thread.join(20)
    hung = thread.is_alive()
    if hung:  # let the blocked open go (a writer appears), so that the thread ends
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert not hung and answers == [False, str(fifo), "done"]
