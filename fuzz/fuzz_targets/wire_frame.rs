//! Frames on the chaperon socket come from inside the jail: any bytes give a request or an
//! error, never a panic or an allocation past the frame cap.
#![no_main]
use chaperon::wire::{read_frame, Request, Response};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = read_frame::<Request>(&mut &data[..]);
    let _ = read_frame::<Response>(&mut &data[..]);
});
