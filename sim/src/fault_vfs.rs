//! The VFS the harness's databases live on: SQLite's own `memdb`, but for one thing. While the
//! schedule has a storage fault due ([`IntentTag::commit_fails`]), the next write to a database
//! file fails with `SQLITE_IOERR_WRITE`, as a failing disk's write would. SQLite then does what
//! it does on a real disk error: the statement (a COMMIT, or a statement outside a transaction)
//! returns the I/O error, and the transaction is rolled back. A handler's error path sees the
//! error code a disk gives, not one the harness made up.
//!
//! The write that fails is the first the COMMIT makes, before any page of the file has changed,
//! so that the rollback has nothing to undo in the file: memdb's rollback journal lives in
//! memory, and a half-written file could not be repaired from it as a journal on disk repairs
//! one after a crash. A database file learns its tag from the harness through a file control of
//! its own ([`give_tag`]); a file with no tag never fails.

use crate::vocabulary::IntentTag;
use rusqlite::ffi;
use rusqlite::Connection;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Once;

/// The VFS's name, for a database URI's `vfs=` parameter.
pub(crate) const VFS_NAME: &str = "retrysim-memdb";
const VFS_NAME_C: &CStr = c"retrysim-memdb";

/// The file control that gives a file its tag: its argument is a `*const IntentTag`. An opcode
/// far above SQLite's own, which other VFSes pass on or answer `SQLITE_NOTFOUND`.
const FCNTL_GIVE_TAG: c_int = 0x7273_0001;

/// memdb, which this VFS wraps (set once, at registration).
static MEMDB: AtomicPtr<ffi::sqlite3_vfs> = AtomicPtr::new(ptr::null_mut());

/// A database file of this VFS: SQLite's handle, the tag that says when a write fails, and
/// memdb's own file after them (at [`INNER_AT`]).
#[repr(C)]
struct FaultFile {
    base: ffi::sqlite3_file,
    /// A `Box<IntentTag>` given by [`give_tag`], or null.
    tag: *mut IntentTag,
}

/// Where memdb's file begins inside a [`FaultFile`]'s allocation (8-byte aligned, as SQLite
/// aligns the allocation).
const INNER_AT: usize = std::mem::size_of::<FaultFile>().next_multiple_of(8);

/// The methods of a [`FaultFile`]: memdb's (the same ones left out), each passed to its file,
/// with [`write`] and [`file_control`] doing more.
static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(close),
    xRead: Some(read),
    xWrite: Some(write),
    xTruncate: Some(truncate),
    xSync: Some(sync),
    xFileSize: Some(file_size),
    xLock: Some(lock),
    xUnlock: Some(unlock),
    xCheckReservedLock: None,
    xFileControl: Some(file_control),
    xSectorSize: None,
    xDeviceCharacteristics: Some(device_characteristics),
    xShmMap: None,
    xShmLock: None,
    xShmBarrier: None,
    xShmUnmap: None,
    xFetch: Some(fetch),
    xUnfetch: Some(unfetch),
};

/// Registers the VFS (once per process; not as the default).
pub(crate) fn register() {
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: sqlite3_vfs_find initialises SQLite if it is not yet; memdb is registered at
        // initialisation and never unregistered, so its pointer stays valid. The copy made of
        // it is leaked, as SQLite keeps a registered VFS for the rest of the process.
        unsafe {
            let memdb = ffi::sqlite3_vfs_find(c"memdb".as_ptr());
            assert!(!memdb.is_null(), "SQLite is built with memdb");
            MEMDB.store(memdb, Ordering::Release);
            let memdb_file_bytes =
                usize::try_from((*memdb).szOsFile).expect("a file's size is positive");
            let vfs = Box::leak(Box::new(ffi::sqlite3_vfs {
                szOsFile: c_int::try_from(INNER_AT + memdb_file_bytes).expect("a file's size fits"),
                pNext: ptr::null_mut(),
                zName: VFS_NAME_C.as_ptr(),
                xOpen: Some(open),
                // memdb's other methods read the VFS below it from `pAppData`, which the copy
                // keeps.
                ..*memdb
            }));
            let code = ffi::sqlite3_vfs_register(vfs, 0);
            assert_eq!(code, ffi::SQLITE_OK, "the storage-fault VFS registers");
        }
    });
}

/// Gives the main database file of `connection` (opened on this VFS) the tag whose storage
/// fault makes its next write fail.
pub(crate) fn give_tag(connection: &Connection, tag: &IntentTag) {
    let tag: *const IntentTag = tag;
    // SAFETY: the handle belongs to an open connection; the file control reads one
    // `IntentTag` through the pointer, which lives for the call, and keeps a clone.
    let code = unsafe {
        ffi::sqlite3_file_control(
            connection.handle(),
            c"main".as_ptr(),
            FCNTL_GIVE_TAG,
            tag.cast_mut().cast(),
        )
    };
    assert_eq!(
        code,
        ffi::SQLITE_OK,
        "the database is on the storage-fault VFS"
    );
}

/// Whether `connection`'s main database is on this VFS (its writes fail when a storage fault
/// is due, so a commit hook need not fail its COMMIT).
pub(crate) fn holds(connection: &Connection) -> bool {
    let mut vfs: *mut ffi::sqlite3_vfs = ptr::null_mut();
    // SAFETY: the handle belongs to an open connection, and SQLITE_FCNTL_VFS_POINTER writes
    // one VFS pointer into `vfs`.
    let code = unsafe {
        ffi::sqlite3_file_control(
            connection.handle(),
            c"main".as_ptr(),
            ffi::SQLITE_FCNTL_VFS_POINTER,
            (&raw mut vfs).cast(),
        )
    };
    // SAFETY: a registered VFS's name is a NUL-terminated string that lives as long as it.
    code == ffi::SQLITE_OK
        && !vfs.is_null()
        && unsafe { CStr::from_ptr((*vfs).zName) } == VFS_NAME_C
}

/// The file below `file` if it is one of this VFS's (memdb's, whose writes never fail), else
/// `file` itself: what [`crate::sqlite::HarnessDb`] copies and writes back whole.
///
/// # Safety
/// `file` is an open database file.
pub(crate) unsafe fn unwrapped(file: *mut ffi::sqlite3_file) -> *mut ffi::sqlite3_file {
    // SAFETY: an open file's methods are set (the caller's promise).
    if ptr::eq(unsafe { (*file).pMethods }, &METHODS) {
        inner(file)
    } else {
        file
    }
}

/// memdb's file inside `file`, one of this VFS's.
fn inner(file: *mut ffi::sqlite3_file) -> *mut ffi::sqlite3_file {
    file.cast::<u8>().wrapping_add(INNER_AT).cast()
}

/// memdb's method `pick` of the file inside `file`.
///
/// # Safety
/// `file` is one of this VFS's files, and memdb opened the file inside it.
unsafe fn below<F>(
    file: *mut ffi::sqlite3_file,
    pick: impl Fn(&ffi::sqlite3_io_methods) -> Option<F>,
) -> F {
    // SAFETY: memdb set its file's methods when it opened it (the caller's promise).
    let methods = unsafe { &*(*inner(file)).pMethods };
    pick(methods).expect("memdb has the method this VFS passes on")
}

unsafe extern "C" fn open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let memdb = MEMDB.load(Ordering::Acquire);
    let outer = file.cast::<FaultFile>();
    // SAFETY: SQLite gives `file` this VFS's `szOsFile` bytes, room for a FaultFile and memdb's
    // file after it; memdb's open reads only its own VFS's fields.
    unsafe {
        (*outer).base.pMethods = ptr::null();
        (*outer).tag = ptr::null_mut();
        let open_below = (*memdb).xOpen.expect("memdb opens files");
        let code = open_below(memdb, name, inner(file), flags, out_flags);
        // A file whose methods are set is closed by SQLite even when its open failed.
        if !(*inner(file)).pMethods.is_null() {
            (*outer).base.pMethods = &METHODS;
        }
        code
    }
}

unsafe extern "C" fn close(file: *mut ffi::sqlite3_file) -> c_int {
    let outer = file.cast::<FaultFile>();
    // SAFETY: SQLite closes an open file of this VFS once; its tag, if any, is a Box given
    // by `file_control`.
    unsafe {
        let code = below(file, |methods| methods.xClose)(inner(file));
        let tag = std::mem::replace(&mut (*outer).tag, ptr::null_mut());
        if !tag.is_null() {
            drop(Box::from_raw(tag));
        }
        code
    }
}

unsafe extern "C" fn write(
    file: *mut ffi::sqlite3_file,
    bytes: *const c_void,
    length: c_int,
    at: ffi::sqlite3_int64,
) -> c_int {
    let tag = file.cast::<FaultFile>();
    // SAFETY: an open file of this VFS; its tag, if set, lives until the file closes.
    unsafe {
        if !(*tag).tag.is_null() && (*(*tag).tag).commit_fails() {
            return ffi::SQLITE_IOERR_WRITE;
        }
        below(file, |methods| methods.xWrite)(inner(file), bytes, length, at)
    }
}

unsafe extern "C" fn file_control(
    file: *mut ffi::sqlite3_file,
    op: c_int,
    argument: *mut c_void,
) -> c_int {
    if op == FCNTL_GIVE_TAG {
        let outer = file.cast::<FaultFile>();
        // SAFETY: `give_tag` passes a pointer to a live IntentTag; the file is open.
        unsafe {
            let given = Box::into_raw(Box::new((*argument.cast::<IntentTag>()).clone()));
            let old = std::mem::replace(&mut (*outer).tag, given);
            if !old.is_null() {
                drop(Box::from_raw(old));
            }
        }
        return ffi::SQLITE_OK;
    }
    // SAFETY: an open file of this VFS.
    unsafe { below(file, |methods| methods.xFileControl)(inner(file), op, argument) }
}

unsafe extern "C" fn read(
    file: *mut ffi::sqlite3_file,
    into: *mut c_void,
    length: c_int,
    at: ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: an open file of this VFS.
    unsafe { below(file, |methods| methods.xRead)(inner(file), into, length, at) }
}

unsafe extern "C" fn truncate(file: *mut ffi::sqlite3_file, size: ffi::sqlite3_int64) -> c_int {
    // SAFETY: an open file of this VFS.
    unsafe { below(file, |methods| methods.xTruncate)(inner(file), size) }
}

unsafe extern "C" fn sync(file: *mut ffi::sqlite3_file, flags: c_int) -> c_int {
    // SAFETY: an open file of this VFS.
    unsafe { below(file, |methods| methods.xSync)(inner(file), flags) }
}

unsafe extern "C" fn file_size(
    file: *mut ffi::sqlite3_file,
    size: *mut ffi::sqlite3_int64,
) -> c_int {
    // SAFETY: an open file of this VFS.
    unsafe { below(file, |methods| methods.xFileSize)(inner(file), size) }
}

unsafe extern "C" fn lock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    // SAFETY: an open file of this VFS.
    unsafe { below(file, |methods| methods.xLock)(inner(file), level) }
}

unsafe extern "C" fn unlock(file: *mut ffi::sqlite3_file, level: c_int) -> c_int {
    // SAFETY: an open file of this VFS.
    unsafe { below(file, |methods| methods.xUnlock)(inner(file), level) }
}

unsafe extern "C" fn device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: an open file of this VFS.
    unsafe { below(file, |methods| methods.xDeviceCharacteristics)(inner(file)) }
}

unsafe extern "C" fn fetch(
    file: *mut ffi::sqlite3_file,
    at: ffi::sqlite3_int64,
    length: c_int,
    pages: *mut *mut c_void,
) -> c_int {
    // SAFETY: an open file of this VFS.
    unsafe { below(file, |methods| methods.xFetch)(inner(file), at, length, pages) }
}

unsafe extern "C" fn unfetch(
    file: *mut ffi::sqlite3_file,
    at: ffi::sqlite3_int64,
    page: *mut c_void,
) -> c_int {
    // SAFETY: an open file of this VFS.
    unsafe { below(file, |methods| methods.xUnfetch)(inner(file), at, page) }
}
