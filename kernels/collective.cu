// collbench kernels: the persistent collective kernel (being written).
