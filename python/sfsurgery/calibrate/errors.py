"""The error calibration raises when its arithmetic cannot go on."""

from ..errors import SfsurgeryError


class CalibrationError(SfsurgeryError, RuntimeError):
    """Calibration could not decide a layer: a Hessian that is not positive
    definite even after dampening, an update that is not finite, a layer
    whose projections did not see the inputs they should share. One line,
    naming the tensor."""
