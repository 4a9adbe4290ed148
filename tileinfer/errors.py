"""Errors a user can cause. Every one derives from TileInferError."""


class TileInferError(Exception):
    """Base of every error caused by input: a bad path, checkpoint, request or setting."""


class CheckpointError(TileInferError):
    """A checkpoint is missing, incomplete or does not match its config."""


class ConfigError(TileInferError):
    """A config is not one TileInfer can run, or a setting is out of range."""


class DrafterMismatchError(CheckpointError):
    """A DFlash drafter does not fit the target it was given."""


class RequestError(TileInferError, ValueError):
    """A generation request cannot be served as asked."""
