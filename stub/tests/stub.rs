//! The stub binary outside any jail, under the names the jail gives it: what it says and the
//! status it exits with when it cannot or may not reach a chaperon. (Inside a jail, with a
//! chaperon and a real cluster: tests/slurm.rs of the launcher's crate.)
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed setup is a failed test

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output};

/// The stub cargo built for these tests, or the one named by `AGENT_SANDBOX_STUB_UNDER_TEST`
/// (tests/run.sh names the release build, static and linked against musl, as sites install it).
fn stub(name: &str, args: &[&OsStr], env: &[(&str, &str)]) -> Output {
    let bin = std::env::var_os("AGENT_SANDBOX_STUB_UNDER_TEST")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_agent-sandbox-stub").into());
    let mut c = Command::new(bin);
    c.arg0(name).args(args).env_clear().env("PATH", "/usr/bin:/bin");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("the stub runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_mailer_is_blocked_with_ex_noperm_and_its_arguments_are_not_echoed() {
    let o = stub("/usr/sbin/sendmail", &[OsStr::new("secret@example.org")], &[]);
    assert_eq!(o.status.code(), Some(77), "{o:?}");
    assert!(stderr(&o).contains("sendmail: sending mail is blocked") && stderr(&o).contains("mail.block"), "{o:?}");
    assert!(!stderr(&o).contains("secret@example.org"), "{o:?}");
    assert!(o.stdout.is_empty());
}

#[test]
fn under_no_stubs_name_it_says_how_it_is_run() {
    let o = stub("agent-sandbox-stub", &[], &[]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(stderr(&o).contains("run it under a Slurm command's or a mailer's name"), "{o:?}");
}

#[test]
fn a_refused_command_is_refused_before_any_chaperon_is_asked() {
    let o = stub("sbcast", &[OsStr::new("a"), OsStr::new("b")], &[]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(stderr(&o).starts_with("sbcast: error: ") && stderr(&o).contains("(refused by agent-sandbox)"), "{o:?}");
}

#[test]
fn its_arguments_are_read_and_one_that_is_not_utf8_is_refused_by_position() {
    // The binary's entry point is C's `main`, and under musl std never learns the arguments
    // (`std::env::args` is empty there): the stub takes them from `main` itself. An argument
    // it did not see could not be refused.
    let bad = OsStr::from_bytes(b"--name=\xff");
    let o = stub("squeue", &[OsStr::new("-h"), bad], &[]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert_eq!(stderr(&o), "squeue: error: argument 2 is not valid UTF-8\n");
}

#[test]
fn without_a_chaperon_a_slurm_command_says_slurm_is_not_available() {
    let o = stub("squeue", &[OsStr::new("-h")], &[]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        stderr(&o).contains("cannot reach agent-sandbox's Slurm chaperon at /run/agent-sandbox/chaperon.sock"),
        "{o:?}"
    );
    // The Landlock backend's channel is named by a descriptor number, never a path.
    let o = stub("squeue", &[], &[("AGENT_SANDBOX_SLURM_FD", "/tmp/sock")]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(stderr(&o).contains("AGENT_SANDBOX_SLURM_FD is \"/tmp/sock\", not agent-sandbox's Slurm channel"), "{o:?}");
}

/// The descriptors of one message on `sock`, and its bytes.
fn receive(sock: &std::os::fd::OwnedFd) -> (Vec<u8>, Vec<std::os::fd::OwnedFd>) {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    use std::os::fd::{AsRawFd, FromRawFd};
    let mut buf = [0u8; 16];
    let mut iov = [std::io::IoSliceMut::new(&mut buf)];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 4]);
    let msg = recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC).unwrap();
    let mut fds = vec![];
    for c in msg.cmsgs().unwrap() {
        if let ControlMessageOwned::ScmRights(v) = c {
            // SAFETY: the kernel just installed these descriptors for this test.
            fds.extend(v.into_iter().map(|fd| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }));
        }
    }
    let n = msg.bytes;
    (buf[..n].to_vec(), fds)
}

/// The stub as the Landlock backend runs it: its chaperon is reached over a seqpacket channel
/// it inherited, named by AGENT_SANDBOX_SLURM_FD (a descriptor number). The test is that
/// chaperon: it takes the stub's end of a stream pair, then (unless `turn_away` answers at
/// once and closes, as a chaperon serving all the calls it may does) the stub's stdin, stdout
/// and stderr and its request, which `answer` answers.
fn through_channel(
    args: &[&str],
    turn_away: Option<&str>,
    answer: impl FnOnce(&chaperon::wire::Request, usize, &mut std::os::unix::net::UnixStream, u32) -> chaperon::wire::Response
        + Send
        + 'static,
) -> Output {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    use std::os::fd::AsRawFd;
    let (ours, theirs) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::empty()).unwrap();
    nix::fcntl::fcntl(&ours, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC)).unwrap();
    let bin = std::env::var_os("AGENT_SANDBOX_STUB_UNDER_TEST")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_agent-sandbox-stub").into());
    let mut c = Command::new(bin);
    c.arg0("squeue").args(args).env_clear().env("PATH", "/usr/bin:/bin");
    c.env("AGENT_SANDBOX_SLURM_FD", theirs.as_raw_fd().to_string());
    c.stdin(std::process::Stdio::null());
    let child = c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    drop(theirs);
    let pid = child.id();
    let turn_away = turn_away.map(str::to_string);
    let chaperon = std::thread::spawn(move || {
        let (bytes, mut fds) = receive(&ours);
        assert_eq!((bytes.as_slice(), fds.len()), (&b"C"[..], 1), "one stream end on the channel");
        let mut conn = std::os::unix::net::UnixStream::from(fds.remove(0));
        if let Some(message) = turn_away {
            chaperon::wire::write_frame(&mut conn, &chaperon::wire::Response::Error { message }).unwrap();
            return;
        }
        let (bytes, stdio) = receive(&conn.try_clone().unwrap().into());
        assert_eq!(bytes, b"F");
        let req: chaperon::wire::Request = chaperon::wire::read_frame(&mut conn).unwrap();
        let response = answer(&req, stdio.len(), &mut conn, pid);
        chaperon::wire::write_frame(&mut conn, &response).unwrap();
    });
    let out = child.wait_with_output().unwrap();
    chaperon.join().expect("the test's chaperon");
    out
}

#[test]
fn over_the_landlock_channel_the_call_goes_out_whole_and_its_status_comes_back() {
    let out = through_channel(&["-h", "--me"], None, |req, passed, _, _| {
        assert_eq!(
            (req.command.as_str(), req.argv.as_slice(), passed),
            ("squeue", &["-h".to_string(), "--me".into()][..], 3)
        );
        chaperon::wire::Response::Exited { code: 42 }
    });
    assert_eq!(out.status.code(), Some(42), "{out:?}");
}

#[test]
fn a_chaperon_that_turns_the_call_away_is_quoted_not_a_broken_pipe() {
    let busy = "the chaperon is busy (too many commands at once); retry";
    let out = through_channel(&["-h"], Some(busy), |_, _, _, _| unreachable!("turned away"));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(stderr(&out), format!("squeue: error: agent-sandbox chaperon: {busy}\n"));
}

#[test]
fn ctrl_c_while_the_command_runs_is_passed_to_the_chaperon() {
    // The stub waits for the answer in one poll of the connection and a signalfd; SIGINT goes
    // to the chaperon as a control frame, which signals the real command (here: answers 130).
    let out = through_channel(&["-h"], None, |_, _, conn, pid| {
        // The stub blocks the signals right after sending the request; this waits past that.
        std::thread::sleep(std::time::Duration::from_millis(200));
        let stub = nix::unistd::Pid::from_raw(pid as i32);
        nix::sys::signal::kill(stub, nix::sys::signal::Signal::SIGINT).unwrap();
        conn.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
        let control: chaperon::wire::Control = chaperon::wire::read_frame(conn).unwrap();
        assert_eq!(control, chaperon::wire::Control::Signal { signal: libc::SIGINT });
        chaperon::wire::Response::Exited { code: 130 }
    });
    assert_eq!(out.status.code(), Some(130), "the stub lived on and reported the command's status: {out:?}");
}
