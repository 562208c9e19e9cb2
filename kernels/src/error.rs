//! The crate's error type.

/// Everything that can go wrong between a launch request and the kernel running.
///
/// The messages are one line each and say what to do: a missing driver or NVRTC is an error a
/// user can act on, never a panic.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no CUDA driver found (libcuda.so could not be loaded): run on a machine with an NVIDIA GPU and driver")]
    DriverNotFound,
    #[error("NVRTC not found (libnvrtc.so.13 could not be loaded): add the CUDA 13 lib directory to LD_LIBRARY_PATH")]
    NvrtcNotFound,
    #[error("cuBLASLt not found (libcublasLt.so.13 could not be loaded): add the CUDA 13 lib directory to LD_LIBRARY_PATH")]
    CublasLtNotFound,
    #[error("no CUDA device visible")]
    NoDevice,
    #[error(
        "GPU compute capability {major}.{minor} is not supported: the kernels need sm_80 or newer"
    )]
    UnsupportedArch { major: i32, minor: i32 },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("NVRTC failed to compile {kernel}: {log}")]
    Compile { kernel: String, log: String },
    #[error("CUDA call {call} failed with {code}")]
    Cuda { call: &'static str, code: String },
    #[error("cuBLASLt call {call} failed with {code}")]
    Cublas { call: &'static str, code: String },
}

/// Result alias used across the crate.
pub type Result<T> = std::result::Result<T, Error>;

pub(crate) fn invalid(msg: impl Into<String>) -> Error {
    Error::InvalidArgument(msg.into())
}
