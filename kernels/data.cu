// collbench kernels: device-side inputs, poison and verification (being written).
