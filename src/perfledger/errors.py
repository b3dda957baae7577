"""The one error type of perfledger: a message for the user and the exit code it maps to."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED_CHECK = 1  # a regression gate crossed (diff --fail-on)
EXIT_BAD_INPUT = 2  # bad input or wrong options


class PerfledgerError(Exception):
    """An error the user can act on; printed as one line, never as a traceback.

    Args:
        message: what is wrong, naming the file or option concerned.
        exit_code: the process exit code; 2 (bad input or usage) unless said otherwise.
    """

    def __init__(self, message: str, exit_code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message


class TraceFormatError(PerfledgerError):
    """A trace file that cannot be read: corrupt, foreign or empty.

    The message is kept to one line whatever it quotes (line breaks become spaces).
    """

    def __init__(self, message: str, exit_code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(
            " ".join(message.split()) if "\n" in message or "\r" in message else message, exit_code
        )


def reason(error: BaseException, limit: int = 200) -> str:
    """A library's exception as a phrase for a one-line message: its first line of text, cut
    at ``limit`` characters (a parser's error can quote many lines of its input)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = lines[0] if lines else type(error).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
