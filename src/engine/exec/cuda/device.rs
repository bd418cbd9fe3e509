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
    /// PCI domain, bus and device as nccl-tests prints them: `0000:1b:00`.
    pub bus_id: String,
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

/// Why no GPU is usable. Serialized as its message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unusable {
    /// The driver library does not load.
    #[error("no CUDA driver (libcuda.so.1 not found)")]
    NoDriver,
    /// `cuInit` failed.
    #[error("the CUDA driver did not initialise: {0}")]
    Init(String),
    /// A driver call failed: which (with its arguments), and the driver's error.
    #[error("{call}: {detail}")]
    Call { call: String, detail: String },
    /// The driver works but counts no device.
    #[error("the CUDA driver sees no GPU")]
    NoGpu,
    /// GPUs the kernels cannot run on: which.
    #[error("{0}: {too_old}; hide older GPUs with CUDA_VISIBLE_DEVICES", too_old = super::kernels::TOO_OLD)]
    TooOld(String),
}

impl Unusable {
    fn call(call: impl Into<String>, e: impl std::fmt::Display) -> Unusable {
        Unusable::Call {
            call: call.into(),
            detail: e.to_string(),
        }
    }
}

impl serde::Serialize for Unusable {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// The CUDA major version of the driver here (12 for 12.8), where there
/// is one; `cuDriverGetVersion` needs no `cuInit`.
pub fn driver_major() -> Option<u32> {
    // SAFETY: only checks whether the library loads.
    if !unsafe { sys::is_culib_present() } {
        return None;
    }
    let mut version = 0;
    // SAFETY: a valid out-pointer; the library is loaded.
    unsafe { sys::cuDriverGetVersion(&mut version) }
        .result()
        .ok()?;
    u32::try_from(version / 1000).ok().filter(|&m| m > 0)
}

/// The GPUs, or why there are none to use.
pub fn probe() -> Result<Devices, Unusable> {
    let probed = probe_driver();
    match &probed {
        Ok(d) => tracing::info!(
            driver = %format_args!("{}.{}", d.driver.0, d.driver.1),
            gpus = d.devices.len(),
            names = ?d.devices.iter().map(|x| format!("{} ({})", x.name, x.arch)).collect::<Vec<_>>(),
            "CUDA driver probed"
        ),
        Err(why) => tracing::info!(reason = %why, "no usable GPU"),
    }
    probed
}

fn probe_driver() -> Result<Devices, Unusable> {
    // SAFETY: only checks whether the library loads.
    if !unsafe { sys::is_culib_present() } {
        tracing::debug!("libcuda did not load (cudarc's is_culib_present)");
        return Err(Unusable::NoDriver);
    }
    tracing::debug!("libcuda loaded");
    result::init().map_err(|e| Unusable::Init(e.to_string()))?;
    let mut version = 0;
    // SAFETY: a valid out-pointer; the driver is initialised.
    unsafe { sys::cuDriverGetVersion(&mut version) }
        .result()
        .map_err(|e| Unusable::call("cuDriverGetVersion", e))?;
    let count = result::device::get_count().map_err(|e| Unusable::call("cuDeviceGetCount", e))?;
    tracing::debug!(driver_version = version, count, "CUDA driver initialised");
    if count <= 0 {
        return Err(Unusable::NoGpu);
    }
    let mut devices = Vec::new();
    let mut handles = Vec::new();
    for ordinal in 0..count {
        let dev = result::device::get(ordinal)
            .map_err(|e| Unusable::call(format!("cuDeviceGet({ordinal})"), e))?;
        let attr = |a| {
            // SAFETY: `dev` came from cuDeviceGet.
            unsafe { result::device::get_attribute(dev, a) }
                .map_err(|e| Unusable::call(format!("device {ordinal} attribute {a:?}"), e))
        };
        use sys::CUdevice_attribute as A;
        let major = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let sms = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let pci = |a| attr(a).map_or(0, |v| v.max(0));
        let bus_id = format!(
            "{:04x}:{:02x}:{:02x}",
            pci(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
            pci(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
            pci(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)
        );
        // SAFETY: `dev` came from cuDeviceGet.
        let memory = unsafe { result::device::total_mem(dev) }
            .map_err(|e| Unusable::call(format!("device {ordinal} memory"), e))?;
        devices.push(DeviceInfo {
            ordinal: ordinal as usize,
            name: result::device::get_name(dev).unwrap_or_else(|_| "unknown".into()),
            capability: (major, minor),
            arch: format!("sm_{major}{minor}"),
            memory_bytes: memory as u64,
            multiprocessors: sms.max(0) as u32,
            bus_id,
        });
        handles.push(dev);
    }
    if let Some(old) = too_old(&devices) {
        return Err(old);
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
    tracing::debug!(p2p = ?p2p, "P2P access between GPUs (row can reach column)");
    Ok(Devices {
        driver: (version / 1000, (version % 1000) / 10),
        devices,
        p2p,
    })
}

/// GPUs older than the kernels need, said as why none is usable.
fn too_old(devices: &[DeviceInfo]) -> Option<Unusable> {
    let old: Vec<String> = devices
        .iter()
        .filter(|d| d.capability.0 * 10 + d.capability.1 < super::kernels::MIN_CC as i32)
        .map(|d| format!("GPU {} ({}, {})", d.ordinal, d.name, d.arch))
        .collect();
    (!old.is_empty()).then(|| Unusable::TooOld(old.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpus_older_than_volta_are_named_as_unusable() {
        let gpu = |ordinal, name: &str, (major, minor)| DeviceInfo {
            ordinal,
            name: name.into(),
            capability: (major, minor),
            arch: format!("sm_{major}{minor}"),
            memory_bytes: 16 << 30,
            multiprocessors: 56,
            bus_id: "0000:01:00".into(),
        };
        assert_eq!(too_old(&[gpu(0, "Tesla V100", (7, 0))]), None);
        let why = too_old(&[gpu(0, "Tesla P100", (6, 0)), gpu(1, "Tesla V100", (7, 0))])
            .unwrap()
            .to_string();
        assert_eq!(why, "GPU 0 (Tesla P100, sm_60): collbench's kernels need compute capability 7.0 (sm_70, Volta) or newer; hide older GPUs with CUDA_VISIBLE_DEVICES");
    }

    #[test]
    fn probing_never_panics_and_explains_an_absence() {
        match probe() {
            Ok(d) => {
                assert!(!d.devices.is_empty());
                assert_eq!(d.p2p.len(), d.devices.len());
                assert!(d.devices.iter().all(|x| x.arch.starts_with("sm_")));
            }
            Err(why) => {
                assert!(!why.to_string().is_empty());
                if std::env::var("COLLBENCH_REQUIRE_GPU").as_deref() == Ok("1") {
                    panic!("COLLBENCH_REQUIRE_GPU=1 but no GPU is usable: {why}");
                }
                eprintln!("no GPU here ({why}); the probe explained it");
            }
        }
    }
}
