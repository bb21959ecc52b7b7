"""glmlaunch: launcher preflight and config calibrator for GLM-5.2 on vLLM."""

__version__ = "0.1.0"
