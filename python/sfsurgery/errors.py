"""Errors the package raises, one class per cause, each one line."""


class SfsurgeryError(Exception):
    """Base class of every error the package raises."""


class RecordError(SfsurgeryError, ValueError):
    """A launch document or record that is not what `sfsurgery plan` or
    `sfsurgery bench --policy` writes, or that does not fit the operands."""


class CheckpointError(SfsurgeryError, ValueError):
    """A checkpoint the package cannot serve: not an sfsurgery `ampere`
    output, a missing or malformed tensor, a shape the kernels refuse."""


class DeviceError(SfsurgeryError, RuntimeError):
    """No usable GPU: none at all, older than sm_80, a CUDA driver too old
    for the PTX, or a driver call that failed."""


class InputError(SfsurgeryError, ValueError):
    """A command's input that cannot be used: a missing, empty or
    malformed text, a text too short for what is asked, an argument out
    of range, a model directory without what the command needs."""
