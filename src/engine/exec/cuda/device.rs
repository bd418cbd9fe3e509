//! Which GPUs this machine has, through the CUDA driver API (cudarc with
//! dynamic loading): names, architectures, memory, the driver version and
//! which pairs can reach each other's memory (P2P). The driver library is
//! probed before any symbol is used, so a machine without it gets an
//! explanation, never a panic.

use cudarc::driver::{result, sys};

/// One GPU.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    /// Compute capability, e.g. (9, 0).
    pub capability: (i32, i32),
    /// NVRTC's name for the architecture, e.g. `sm_90`.
    pub arch: String,
    pub memory_bytes: u64,
    pub multiprocessors: u32,
}

/// The machine's GPUs as the driver sees them.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Devices {
    /// The driver's CUDA version, e.g. (12, 8).
    pub driver: (i32, i32),
    pub devices: Vec<DeviceInfo>,
    /// `p2p[a][b]`: device `a` can access device `b`'s memory directly.
    pub p2p: Vec<Vec<bool>>,
}

/// Why no GPU is usable.
pub type Unusable = String;

/// The GPUs, or why there are none to use.
pub fn probe() -> Result<Devices, Unusable> {
    // SAFETY: only checks whether the library loads.
    if !unsafe { sys::is_culib_present() } {
        return Err("no CUDA driver (libcuda.so.1 not found)".into());
    }
    result::init().map_err(|e| format!("the CUDA driver did not initialise: {e}"))?;
    let mut version = 0;
    // SAFETY: a valid out-pointer; the driver is initialised.
    unsafe { sys::cuDriverGetVersion(&mut version) }
        .result()
        .map_err(|e| format!("cuDriverGetVersion: {e}"))?;
    let count = result::device::get_count().map_err(|e| format!("cuDeviceGetCount: {e}"))?;
    if count <= 0 {
        return Err("the CUDA driver sees no GPU".into());
    }
    let mut devices = Vec::new();
    let mut handles = Vec::new();
    for ordinal in 0..count {
        let dev =
            result::device::get(ordinal).map_err(|e| format!("cuDeviceGet({ordinal}): {e}"))?;
        let attr = |a| {
            // SAFETY: `dev` came from cuDeviceGet.
            unsafe { result::device::get_attribute(dev, a) }
                .map_err(|e| format!("device {ordinal} attribute {a:?}: {e}"))
        };
        use sys::CUdevice_attribute as A;
        let major = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let sms = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        // SAFETY: `dev` came from cuDeviceGet.
        let memory = unsafe { result::device::total_mem(dev) }
            .map_err(|e| format!("device {ordinal} memory: {e}"))?;
        devices.push(DeviceInfo {
            ordinal: ordinal as usize,
            name: result::device::get_name(dev).unwrap_or_else(|_| "unknown".into()),
            capability: (major, minor),
            arch: format!("sm_{major}{minor}"),
            memory_bytes: memory as u64,
            multiprocessors: sms.max(0) as u32,
        });
        handles.push(dev);
    }
    let p2p = handles
        .iter()
        .map(|&a| {
            handles
                .iter()
                .map(|&b| {
                    if a == b {
                        return true;
                    }
                    let mut can = 0;
                    // SAFETY: both handles came from cuDeviceGet.
                    let ok = unsafe { sys::cuDeviceCanAccessPeer(&mut can, a, b) }.result();
                    ok.is_ok() && can != 0
                })
                .collect()
        })
        .collect();
    Ok(Devices {
        driver: (version / 1000, (version % 1000) / 10),
        devices,
        p2p,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probing_never_panics_and_explains_an_absence() {
        match probe() {
            Ok(d) => {
                assert!(!d.devices.is_empty());
                assert_eq!(d.p2p.len(), d.devices.len());
                assert!(d.devices.iter().all(|x| x.arch.starts_with("sm_")));
            }
            Err(why) => {
                assert!(!why.is_empty());
                if std::env::var("COLLBENCH_REQUIRE_GPU").as_deref() == Ok("1") {
                    panic!("COLLBENCH_REQUIRE_GPU=1 but no GPU is usable: {why}");
                }
                eprintln!("no GPU here ({why}); the probe explained it");
            }
        }
    }
}
