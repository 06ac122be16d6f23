"""SGLang on a machine without a GPU: torch stand-ins for the kernels it cannot run there."""
