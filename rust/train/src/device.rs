//! Where a trainer computes: the CPU, or an NVIDIA GPU through candle's CUDA backend.
//!
//! A build with the `cuda` feature opens CUDA's libraries only when a GPU is asked for (the
//! workspace patches candle to use cudarc's `dynamic-loading`), so the same build trains on
//! the CPU of a machine without a driver. Before a device is opened, every library it needs is
//! looked for here: cudarc itself would panic on the first missing one, and the user needs its
//! name and where it comes from, not a backtrace.

use candle_core::Device;

use crate::error::{Result, TrainError};

/// What this process can see of CUDA: whether the build has it, which libraries load, and
/// the cards the driver lists (after `CUDA_VISIBLE_DEVICES`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CudaReport {
    /// Whether this build has the `cuda` feature.
    pub built: bool,
    /// The CUDA version the build targets (`13.0`), empty without the feature.
    pub toolkit: String,
    /// Each library a device needs, in the order they are opened.
    pub libraries: Vec<CudaLibrary>,
    /// The driver's CUDA version (`13.0`), when the driver loads.
    pub driver: Option<String>,
    /// The cards this process may use.
    pub cards: Vec<CudaCard>,
    /// Why the cards could not be listed, when the driver loads but fails.
    pub error: Option<String>,
}

/// One of CUDA's libraries, and whether it loads here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaLibrary {
    /// What it is (`cuBLAS`).
    pub name: String,
    /// The file names tried, most likely first (`libcublas.so.13`...).
    pub files: Vec<String>,
    /// Whether one of them loaded.
    pub found: bool,
    /// Where it comes from when it is missing.
    pub hint: String,
}

/// A GPU the driver lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaCard {
    /// Its ordinal in this process (`cuda:<ordinal>`).
    pub ordinal: usize,
    /// The card's name (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// Its compute capability (`(9, 0)`).
    pub capability: (i32, i32),
    /// Its memory in bytes.
    pub memory_bytes: u64,
}

/// The lowest compute capability the build's kernels run on: they are PTX for `compute_80`,
/// which the driver compiles for the card it finds.
pub const MIN_CAPABILITY: (i32, i32) = (8, 0);

/// What a device name asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asked {
    Cpu,
    Auto,
    Cuda(usize),
}

/// Reads `cpu`, `auto`, `cuda` or `cuda:<n>`.
fn parse(name: &str) -> Result<Asked> {
    match name {
        "cpu" => Ok(Asked::Cpu),
        "auto" => Ok(Asked::Auto),
        "cuda" => Ok(Asked::Cuda(0)),
        other => match other.strip_prefix("cuda:").and_then(|n| n.parse::<usize>().ok()) {
            Some(ordinal) => Ok(Asked::Cuda(ordinal)),
            None => {
                Err(TrainError::InvalidArgument(format!("device '{name}': use cpu, auto, cuda or cuda:<n>")))
            }
        },
    }
}

/// Checks that `name` is a device name, without opening anything.
pub fn check_name(name: &str) -> Result<()> {
    parse(name).map(|_| ())
}

/// Opens the device `name` stands for: `cpu`, `cuda` (`cuda:0`), `cuda:<n>`, or `auto` (the
/// first GPU this process sees when the build has CUDA, its libraries load and that card can
/// run the kernels, else the CPU).
pub fn open(name: &str) -> Result<Device> {
    match parse(name)? {
        Asked::Cpu => Ok(Device::Cpu),
        Asked::Auto => {
            // A card the kernels cannot run on (below 8.0) leaves `auto` on the CPU too.
            let report = cuda_report();
            let usable = report.libraries.iter().all(|l| l.found)
                && report.cards.first().is_some_and(|c| c.capability >= MIN_CAPABILITY);
            if usable { open_cuda(name, 0, &report) } else { Ok(Device::Cpu) }
        }
        Asked::Cuda(ordinal) => open_cuda(name, ordinal, &cuda_report()),
    }
}

/// The name of an open device: `cpu`, `cuda:<n>` (or candle's name for another backend).
pub fn name(device: &Device) -> String {
    match device.location() {
        candle_core::DeviceLocation::Cpu => "cpu".into(),
        candle_core::DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// The memory of the GPU `device` is, in bytes; None for the CPU or when the driver does not
/// say.
pub fn memory_bytes(device: &Device) -> Option<u64> {
    match device.location() {
        candle_core::DeviceLocation::Cuda { gpu_id } => {
            cuda_report().cards.get(gpu_id).map(|card| card.memory_bytes)
        }
        _ => None,
    }
}

/// Checks every reason `cuda:<ordinal>` could not open, naming it, then opens it.
fn open_cuda(name: &str, ordinal: usize, report: &CudaReport) -> Result<Device> {
    let unavailable = |library: Option<&str>, reason: String| TrainError::DeviceUnavailable {
        device: name.to_owned(),
        library: library.map(str::to_owned),
        reason,
    };
    if !report.built {
        return Err(unavailable(
            None,
            "this sparktrain was built without CUDA; install the CUDA build (docs/deploy.md, \"GPUs\")"
                .into(),
        ));
    }
    if let Some(missing) = report.libraries.iter().find(|l| !l.found) {
        let first = missing.files.first().map_or("", String::as_str);
        return Err(unavailable(
            Some(first),
            format!(
                "{} ({}) cannot be loaded on this host; {} (tried {})",
                missing.name,
                first,
                missing.hint,
                missing.files.join(", ")
            ),
        ));
    }
    if let Some(error) = &report.error {
        return Err(unavailable(None, format!("the NVIDIA driver fails: {error}")));
    }
    let Some(card) = report.cards.get(ordinal) else {
        let visible = std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_else(|_| "unset".into());
        return Err(unavailable(
            None,
            format!("this process sees {} GPU(s) (CUDA_VISIBLE_DEVICES={visible})", report.cards.len()),
        ));
    };
    if card.capability < MIN_CAPABILITY {
        return Err(unavailable(
            None,
            format!(
                "{} has compute capability {}.{}; sparktrain's kernels need {}.{} or newer",
                card.name, card.capability.0, card.capability.1, MIN_CAPABILITY.0, MIN_CAPABILITY.1
            ),
        ));
    }
    // candle queues a CUDA device's work on each calling thread's own default stream
    // (`CU_STREAM_PER_THREAD`): a thread that hands device tensors to another must wait for its
    // stream first, as the prefetch thread does (`prefetch.rs`).
    let device = Device::new_cuda(ordinal)
        .map_err(|e| unavailable(None, format!("{} would not open: {e}", card.name)))?;
    untracked(&device);
    Ok(device)
}

/// Stops cudarc from giving each new device buffer a pair of CUDA events.
///
/// cudarc waits on and records those events only once a context has streams of its own
/// (`CudaContext::new_stream`), to order a buffer's uses across them. candle's device never
/// makes one: it queues on the calling thread's default stream, and the engine orders threads
/// itself (see above). The events are then created with every buffer and destroyed with it,
/// unused: four driver calls for each of the two or three hundred buffers a step allocates,
/// on the host's side of a step that the host's queueing already bounds.
fn untracked(device: &Device) {
    #[cfg(feature = "cuda")]
    if let Device::Cuda(cuda) = device {
        // SAFETY: cudarc asks that buffers made without events are not shared between streams
        // it synchronizes; no stream of cudarc's exists here (see above), so nothing relied on
        // the events.
        unsafe { cuda.disable_event_tracking() };
    }
    #[cfg(not(feature = "cuda"))]
    let _ = device;
}

/// What this process can see of CUDA (nothing is opened beyond the libraries and the driver's
/// device list).
pub fn cuda_report() -> CudaReport {
    imp::report()
}

#[cfg(not(feature = "cuda"))]
mod imp {
    pub(super) fn report() -> super::CudaReport {
        super::CudaReport::default()
    }
}

#[cfg(feature = "cuda")]
mod imp {
    use super::{CudaCard, CudaLibrary, CudaReport};
    use candle_core::cuda_backend::cudarc;
    use cudarc::driver::{result, sys};

    /// The libraries a device opens: the driver's, then cuBLAS (which itself needs cuBLASLt)
    /// and cuRAND. NVRTC is left out: candle loads its kernels as PTX through the driver.
    fn libraries() -> Vec<CudaLibrary> {
        let (major, minor) = (sys::CUDA_VERSION / 1000, sys::CUDA_VERSION % 1000 / 10);
        let driver = format!("install NVIDIA's driver for CUDA {major}.{minor} or newer");
        let pip = format!(
            "pip install 'sparktrain[cuda]' (PyPI's CUDA {major} libraries), or put CUDA {major}'s lib64 on LD_LIBRARY_PATH"
        );
        // SAFETY: each only tries to dlopen the library's file names.
        let probes = unsafe {
            [
                ("the NVIDIA driver", "cuda", ".so.1", cudarc::driver::sys::is_culib_present(), driver),
                ("cuBLASLt", "cublasLt", "", cudarc::cublaslt::sys::is_culib_present(), pip.clone()),
                ("cuBLAS", "cublas", "", cudarc::cublas::sys::is_culib_present(), pip.clone()),
                // cuRAND keeps its own major version (10 in CUDA 12 and 13).
                ("cuRAND", "curand", ".so.10", cudarc::curand::sys::is_culib_present(), pip),
            ]
        };
        let toolkit = format!(".so.{major}");
        probes
            .into_iter()
            .map(|(name, stem, usual, found, hint)| {
                // cudarc tries the bare `lib<name>.so` first; a message names the file the
                // driver or a package installs first instead.
                let usual = if usual.is_empty() { toolkit.as_str() } else { usual };
                let mut files = cudarc::get_lib_name_candidates(stem);
                files.sort_by_key(|f| !f.ends_with(usual));
                let mut seen = std::collections::HashSet::new();
                files.retain(|f| seen.insert(f.clone()));
                CudaLibrary { name: name.into(), files, found, hint }
            })
            .collect()
    }

    pub(super) fn report() -> CudaReport {
        let libraries = libraries();
        let mut report = CudaReport {
            built: true,
            toolkit: format!("{}.{}", sys::CUDA_VERSION / 1000, sys::CUDA_VERSION % 1000 / 10),
            libraries,
            ..CudaReport::default()
        };
        if !report.libraries[0].found {
            return report;
        }
        match cards() {
            Ok((driver, cards)) => {
                report.driver = Some(driver);
                report.cards = cards;
            }
            Err(e) => report.error = Some(e.to_string()),
        }
        report
    }

    fn cards() -> Result<(String, Vec<CudaCard>), result::DriverError> {
        result::init()?;
        let mut version = 0;
        // SAFETY: writes one int.
        unsafe { sys::cuDriverGetVersion(&mut version) }.result()?;
        let driver = format!("{}.{}", version / 1000, version % 1000 / 10);
        let count = result::device::get_count()?;
        let mut cards = Vec::new();
        for ordinal in 0..count {
            let dev = result::device::get(ordinal)?;
            use sys::CUdevice_attribute::*;
            // SAFETY: `dev` comes from `get`.
            let (major, minor, memory) = unsafe {
                (
                    result::device::get_attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
                    result::device::get_attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
                    result::device::total_mem(dev)?,
                )
            };
            cards.push(CudaCard {
                ordinal: ordinal as usize,
                name: result::device::get_name(dev)?,
                capability: (major, minor),
                memory_bytes: memory as u64,
            });
        }
        Ok((driver, cards))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_before_anything_opens() {
        assert!(matches!(open("cpu"), Ok(Device::Cpu)));
        assert_eq!(name(&Device::Cpu), "cpu");
        let err = open("gpu").unwrap_err().to_string();
        assert!(err.contains("device 'gpu'") && err.contains("cuda:<n>"), "{err}");
        assert!(open("cuda:x").is_err());
    }

    /// On a machine without a driver (CI's), `auto` trains on the CPU and `cuda` names what
    /// is missing: the build, or the driver's library.
    #[test]
    fn without_a_gpu_auto_is_the_cpu_and_cuda_says_what_is_missing() {
        let report = cuda_report();
        if !report.cards.is_empty() {
            return; // a GPU machine: the GPU tests cover it
        }
        assert!(matches!(open("auto"), Ok(Device::Cpu)));
        let err = open("cuda:0").unwrap_err();
        let TrainError::DeviceUnavailable { device, library, reason } = &err else { panic!("{err}") };
        assert_eq!(device, "cuda:0");
        if cfg!(feature = "cuda") {
            assert!(report.built);
            if !report.libraries[0].found {
                assert_eq!(library.as_deref(), Some("libcuda.so.1"), "{err}");
                assert!(reason.contains("NVIDIA driver") && reason.contains("CUDA 13"), "{err}");
            }
        } else {
            assert!(!report.built && library.is_none());
            assert!(reason.contains("built without CUDA"), "{err}");
        }
    }
}
