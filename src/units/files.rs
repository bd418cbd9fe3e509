//! Output files a user names: where writing them lands (a descriptor, a
//! device or FIFO, a regular file at the end of its links), and writing
//! them so that a failed write never costs what was there.

use std::path::{Path, PathBuf};

/// Where an output a user named ends up, its links followed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutTarget {
    /// An open descriptor of this process (`/dev/stdout`, `/dev/fd/3`,
    /// `/proc/self/fd/1`, or a link to one): written through it, at its
    /// offset (a shell's `>>` keeps appending), never replaced.
    Fd(i32),
    /// A device or FIFO (`/dev/null`): written in place.
    Special(PathBuf),
    /// A regular file at this path, links followed (it may not exist yet):
    /// replaced atomically, so a link to it stays a link.
    File(PathBuf),
}

/// The descriptor a path names by itself: `/dev/stdout` 1, `/dev/stderr`
/// 2, and N for a name N in this process's descriptor folder, however it
/// is spelled (`/dev/fd/N`, `/proc/self/fd/N`, `/proc/thread-self/fd/N`,
/// `/dev/fd//N`): its folder resolves to `/proc/<pid>/fd` or
/// `/proc/<pid>/task/<tid>/fd`.
fn fd_named(path: &Path) -> Option<i32> {
    match path.to_str()? {
        "/dev/stdout" => return Some(1),
        "/dev/stderr" => return Some(2),
        _ => {}
    }
    // As the kernel names them: decimal, no sign, no leading zero.
    let name = path.file_name()?.to_str()?;
    let n: i32 = name.parse().ok()?;
    if n < 0 || n.to_string() != name {
        return None;
    }
    let dir = path.parent()?.canonicalize().ok()?;
    let pid = std::process::id().to_string();
    let parts: Vec<&str> = dir.to_str()?.split('/').collect();
    let ours = match parts.as_slice() {
        ["", "proc", p, "fd"] => *p == pid,
        ["", "proc", p, "task", _, "fd"] => *p == pid,
        _ => false,
    };
    ours.then_some(n)
}

/// Resolves `path` to where writing it lands ([`OutTarget`]).
pub fn out_target(path: &Path) -> OutTarget {
    let mut at = path.to_path_buf();
    // Links are followed hop by hop (a hop may name a descriptor), as the
    // kernel does, at most 40 of them.
    for _ in 0..40 {
        if let Some(fd) = fd_named(&at) {
            return OutTarget::Fd(fd);
        }
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => match std::fs::read_link(&at) {
                Ok(next) => {
                    at = match at.parent() {
                        Some(dir) if next.is_relative() => dir.join(next),
                        _ => next,
                    };
                }
                Err(_) => break,
            },
            Ok(m) if !m.is_file() && !m.is_dir() => return OutTarget::Special(at),
            _ => break,
        }
    }
    OutTarget::File(at)
}

/// The path writing `path` lands on, its links followed (`path` itself
/// for a descriptor).
pub fn output_end(path: &Path) -> PathBuf {
    match out_target(path) {
        OutTarget::File(p) | OutTarget::Special(p) => p,
        OutTarget::Fd(_) => path.to_path_buf(),
    }
}

/// Whether `path` is something other than a regular file (`/dev/null`, a
/// FIFO, `/dev/stdout`): written in place, never replaced by a rename.
pub fn is_special(path: &Path) -> bool {
    !matches!(out_target(path), OutTarget::File(_))
}

/// Opens an output that is written in place: a descriptor (duplicated, so
/// it shares the offset) or a device or FIFO. None for a regular file.
pub fn open_in_place(path: &Path) -> Option<std::io::Result<std::fs::File>> {
    match out_target(path) {
        OutTarget::Fd(fd) => Some(dup_fd(fd)),
        OutTarget::Special(p) => Some(open_special(&p)),
        OutTarget::File(_) => None,
    }
}

/// A device or FIFO opened for writing without waiting: a FIFO whose
/// reader went away since the outputs were checked would block the open
/// for ever, past the watchdog and every timeout (the rows are written
/// where nothing can interrupt it). Writes then wait as usual.
fn open_special(p: &Path) -> std::io::Result<std::fs::File> {
    if let Some(f) = take_held(p) {
        return Ok(f);
    }
    open_fresh(p).map_err(|e| match e.raw_os_error() {
        Some(libc::ENXIO) => std::io::Error::other("a FIFO no process reads (any more)"),
        _ => e,
    })
}

/// Opens the device or FIFO at `p` for writing without waiting (ENXIO: a
/// FIFO nobody reads), then makes its writes wait as usual.
fn open_fresh(p: &Path) -> std::io::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(p)?;
    // SAFETY: F_GETFL/F_SETFL on the descriptor this File owns.
    unsafe {
        let flags = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
        if flags < 0 || libc::fcntl(f.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(f)
}

/// Checks that the device or FIFO at `p` opens for writing now (ENXIO: a
/// FIFO nobody reads), and keeps what it opened for the write that comes
/// later ([`open_in_place`] takes it).
pub fn check_special(p: &Path) -> std::io::Result<()> {
    let f = open_fresh(p)?;
    hold_special(p, f);
    Ok(())
}

/// Devices and FIFOs opened for writing when the outputs were checked,
/// kept open until written: a FIFO's reader that came before the check
/// would read the end of its data were the check's descriptor closed.
static HELD: std::sync::Mutex<Vec<(PathBuf, std::fs::File)>> = std::sync::Mutex::new(Vec::new());

/// Keeps `f`, the device or FIFO at `p` opened for writing, for the write
/// that comes later.
fn hold_special(p: &Path, f: std::fs::File) {
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    // The new descriptor is open before the old one closes: a reader
    // never sees the writers go.
    let old = held
        .iter()
        .position(|(q, _)| q == p)
        .map(|i| held.remove(i));
    held.push((p.to_path_buf(), f));
    drop(old);
}

/// Closes every descriptor held since the outputs were checked: they are
/// another process's to write (the `--procs` launcher's rank 0).
pub fn release_held() {
    HELD.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

/// The descriptor held for `p` since the outputs were checked, if any
/// (the check's descriptor was opened without waiting, then made to wait
/// on writes).
fn take_held(p: &Path) -> Option<std::fs::File> {
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    let i = held.iter().position(|(q, _)| q == p)?;
    Some(held.remove(i).1)
}

/// A `File` on a duplicate of this process's descriptor `fd`, or the error
/// of a descriptor that is not open.
fn dup_fd(fd: i32) -> std::io::Result<std::fs::File> {
    use std::os::fd::FromRawFd;
    // SAFETY: F_DUPFD_CLOEXEC reads nothing but the descriptor number, and
    // fails (EBADF) on one that is not open; what it returns is a new
    // descriptor this File alone owns.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if dup < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // Past stderr, only a descriptor the process was started with (a
    // shell's `3>file`): those this process opened itself (its MPI
    // sockets, shared memory, dumps) are close-on-exec, and no output.
    // SAFETY: F_GETFD reads the flags of an open descriptor.
    if fd > 2 && unsafe { libc::fcntl(fd, libc::F_GETFD) } & libc::FD_CLOEXEC != 0 {
        // SAFETY: `dup` is ours and closed once.
        unsafe { libc::close(dup) };
        return Err(std::io::Error::other(format!(
            "descriptor {fd} is one collbench opened itself, not one it was given"
        )));
    }
    // SAFETY: as above, on the descriptor just made.
    let flags = unsafe { libc::fcntl(dup, libc::F_GETFL) };
    if flags >= 0 && flags & libc::O_ACCMODE == libc::O_RDONLY {
        // SAFETY: `dup` is ours and closed once.
        unsafe { libc::close(dup) };
        return Err(std::io::Error::other(format!(
            "descriptor {fd} is open for reading only"
        )));
    }
    // SAFETY: `dup` is open and owned by nothing else.
    Ok(unsafe { std::fs::File::from_raw_fd(dup) })
}

/// Writes `bytes` to `path` through a temporary file and a rename (at the
/// end of its links: a link stays a link); a special file (a device, a
/// FIFO, a descriptor such as `/dev/stdout`) is written in place instead,
/// so that `--json /dev/null` never replaces the device with a file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(f) = open_in_place(path) {
        let mut f = f?;
        std::io::Write::write_all(&mut f, bytes)?;
        return std::io::Write::flush(&mut f);
    }
    let OutTarget::File(path) = out_target(path) else {
        return Err(std::io::Error::other(
            "the output changed while it was written",
        ));
    };
    let (mut f, tmp) = create_beside(&path)?;
    let written = std::io::Write::write_all(&mut f, bytes).and_then(|()| f.sync_all());
    drop(f);
    let done = written.and_then(|()| std::fs::rename(&tmp, &path));
    if done.is_err() {
        // A full disk leaves no half file behind.
        let _ = std::fs::remove_file(&tmp);
    }
    done
}

/// Whether an output named `path` is this process's stdout: `-`, or
/// `/dev/stdout` (a link to it, `/dev/fd/1`), which are written alike.
pub fn is_stdout(path: &Path) -> bool {
    path.as_os_str() == "-" || out_target(path) == OutTarget::Fd(1)
}

/// Opens an output for writing from its start: in place when it is a
/// descriptor, device or FIFO ([`open_in_place`]), else the regular file at
/// the end of its links, written under a temporary name beside it until
/// [`Output::commit`].
pub fn create_output(path: &Path) -> std::io::Result<Output> {
    if let Some(f) = open_in_place(path) {
        return Ok(Output {
            file: f?,
            rename: None,
        });
    }
    let OutTarget::File(to) = out_target(path) else {
        return Err(std::io::Error::other(
            "the output changed while it was opened",
        ));
    };
    let (file, tmp) = create_beside(&to)?;
    pending().push((tmp.clone(), to.clone()));
    Ok(Output {
        file,
        rename: Some((tmp, to)),
    })
}

/// The temporary name a regular file is written under, beside it: its
/// name and `.tmpPID`, the name cut where the whole would pass the 255
/// bytes a file name may have (a name that is legal must stay writable).
fn beside(path: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let suffix = format!(".tmp{}", std::process::id());
    let name = path.file_name().map_or(&[][..], |n| n.as_bytes());
    // Room for the suffix and a count after it (`.99`, see create_beside),
    // cut between characters where the name is UTF-8.
    let mut keep = name.len().min(NAME_MAX - suffix.len() - 3);
    if let Ok(text) = std::str::from_utf8(name) {
        while !text.is_char_boundary(keep) {
            keep -= 1;
        }
    }
    let mut tmp = std::ffi::OsStr::from_bytes(&name[..keep]).to_owned();
    tmp.push(&suffix);
    path.with_file_name(tmp)
}

/// The most bytes a file name may have (Linux's NAME_MAX).
pub const NAME_MAX: usize = 255;

/// A new file beside `path` ([`beside`], with a count after it where that
/// name is taken), made here and no link followed: a link planted at a
/// name that can be guessed redirects nothing.
fn create_beside(path: &Path) -> std::io::Result<(std::fs::File, PathBuf)> {
    use std::os::unix::fs::OpenOptionsExt;
    let base = beside(path);
    for n in 0..100 {
        let tmp = match n {
            0 => base.clone(),
            n => {
                let mut t = base.clone().into_os_string();
                t.push(format!(".{n}"));
                PathBuf::from(t)
            }
        };
        let made = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp);
        match made {
            Ok(f) => {
                // A file replaced keeps its permissions (a private file
                // stays private).
                if let Ok(old) = std::fs::metadata(path) {
                    let _ = f.set_permissions(old.permissions());
                }
                return Ok((f, tmp));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other(format!(
        "{}: 100 temporary names beside it are taken",
        path.display()
    )))
}

/// Regular-file outputs being written, as (temporary, final) paths.
static PENDING: std::sync::Mutex<Vec<(PathBuf, PathBuf)>> = std::sync::Mutex::new(Vec::new());

fn pending() -> std::sync::MutexGuard<'static, Vec<(PathBuf, PathBuf)>> {
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Puts every output still being written at its path as it stands (every
/// row written so far): for a process that must leave at once (`_exit`
/// after a hang that did not stop), whose outputs are never committed.
pub fn commit_pending() {
    for (tmp, to) in pending().drain(..) {
        let _ = std::fs::rename(&tmp, &to);
    }
}

/// An output being written ([`create_output`]): in place, or a regular
/// file under a temporary name that [`Output::commit`] moves over the file
/// at its path. A write that fails, or an output never committed, leaves
/// the file that was there, and no temporary one.
pub struct Output {
    file: std::fs::File,
    /// (temporary, final) for a regular file not yet committed.
    rename: Option<(PathBuf, PathBuf)>,
}

impl Output {
    /// Puts the output at its path: a regular file is synced and renamed
    /// over what was there. A rename that fails keeps the temporary file,
    /// named in the error: it holds the whole output.
    pub fn commit(mut self) -> std::io::Result<()> {
        let Some((tmp, to)) = self.rename.take() else {
            return std::io::Write::flush(&mut self.file);
        };
        pending().retain(|(t, _)| *t != tmp);
        if let Err(e) = self.file.sync_all() {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        std::fs::rename(&tmp, &to).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("{e}; what was written is in {}", tmp.display()),
            )
        })
    }
}

impl std::io::Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.file.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        if let Some((tmp, _)) = self.rename.take() {
            pending().retain(|(t, _)| *t != tmp);
            let _ = std::fs::remove_file(tmp);
        }
    }
}

#[cfg(test)]
mod output_tests {
    use super::*;

    /// A temporary name fits 255 bytes, cut between characters.
    #[test]
    fn temporary_names_fit_and_cut_between_characters() {
        use std::os::unix::ffi::OsStrExt;
        let name = format!("{}.json", "é".repeat(124));
        assert_eq!(name.len(), 253);
        let tmp = beside(&Path::new("/d").join(&name));
        let t = tmp.file_name().unwrap();
        assert!(t.len() + 3 <= NAME_MAX, "{}", t.len());
        assert!(std::str::from_utf8(t.as_bytes()).is_ok());
        assert_eq!(tmp.parent(), Some(Path::new("/d")));
        let short = beside(Path::new("r.json"));
        assert!(short.to_string_lossy().starts_with("r.json.tmp"));
    }

    #[test]
    fn descriptors_are_told_however_spelled() {
        for (p, fd) in [
            ("/dev/stdout", Some(1)),
            ("/dev/stderr", Some(2)),
            ("/dev/fd/1", Some(1)),
            ("/dev/fd//1", Some(1)),
            ("/proc/self/fd/2", Some(2)),
            ("/proc/thread-self/fd/1", Some(1)),
            ("/dev/fd/01", None),
            ("/dev/fd/+1", None),
            ("/tmp/1", None),
        ] {
            assert_eq!(fd_named(Path::new(p)), fd, "{p}");
        }
        let pid = std::process::id();
        assert_eq!(fd_named(Path::new(&format!("/proc/{pid}/fd/1"))), Some(1));
        // Another process's descriptor is a file of its own there.
        assert_eq!(fd_named(Path::new("/proc/1/fd/1")), None);
    }

    #[test]
    fn links_are_followed_to_their_end() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("sub/real.json");
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::os::unix::fs::symlink("sub/real.json", d.path().join("a")).unwrap();
        std::os::unix::fs::symlink("a", d.path().join("b")).unwrap();
        assert_eq!(
            out_target(&d.path().join("b")),
            OutTarget::File(real.clone())
        );
        std::os::unix::fs::symlink("/dev/null", d.path().join("n")).unwrap();
        assert_eq!(
            out_target(&d.path().join("n")),
            OutTarget::Special("/dev/null".into())
        );
        std::os::unix::fs::symlink("/proc/self/fd/1", d.path().join("o")).unwrap();
        assert_eq!(out_target(&d.path().join("o")), OutTarget::Fd(1));
        std::os::unix::fs::symlink("loop", d.path().join("loop")).unwrap();
        assert!(matches!(
            out_target(&d.path().join("loop")),
            OutTarget::File(_)
        ));
        // A descriptor this process opened itself is no output.
        let own = std::fs::File::open(&real)
            .or_else(|_| std::fs::File::create(&real))
            .unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&own);
        let e = open_in_place(Path::new(&format!("/dev/fd/{fd}")))
            .unwrap()
            .unwrap_err();
        assert!(e.to_string().contains("opened itself"), "{e}");
    }

    /// A regular file is written under a temporary name and put in place
    /// by `commit`; an output dropped uncommitted (a write that failed)
    /// leaves the file that was there, and nothing beside it.
    #[test]
    fn an_output_replaces_its_file_only_when_committed() {
        use std::io::Write;
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("r.csv");
        std::fs::write(&path, "KEEP").unwrap();
        let mut out = create_output(&path).unwrap();
        out.write_all(b"half").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "KEEP");
        drop(out);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "KEEP");
        let names = || std::fs::read_dir(d.path()).unwrap().count();
        assert_eq!(names(), 1);
        let mut out = create_output(&path).unwrap();
        out.write_all(b"new").unwrap();
        out.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        assert_eq!(names(), 1);
        // A link stays a link: the file at its end is replaced.
        let link = d.path().join("l.csv");
        std::os::unix::fs::symlink("r.csv", &link).unwrap();
        let mut out = create_output(&link).unwrap();
        out.write_all(b"via").unwrap();
        out.commit().unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "via");
        // A link planted at the temporary name redirects nothing.
        let victim = d.path().join("victim");
        std::fs::write(&victim, "SAFE").unwrap();
        std::os::unix::fs::symlink(&victim, beside(&path)).unwrap();
        let mut out = create_output(&path).unwrap();
        out.write_all(b"next").unwrap();
        out.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "SAFE");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "next");
        std::fs::remove_file(beside(&path)).unwrap();
        // A process leaving at once (`_exit` after a hang) puts what was
        // written at its path first.
        let mut out = create_output(&path).unwrap();
        out.write_all(b"rows so far").unwrap();
        commit_pending();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "rows so far");
        drop(out);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "rows so far");
        assert_eq!(names(), 3, "r.csv, l.csv and victim only");
    }
}
