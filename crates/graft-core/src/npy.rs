//! .npy / .npz input and output.
