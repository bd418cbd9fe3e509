//! Loading flight-recorder dumps (collbench's, PyTorch's) and diagnosing hangs.
