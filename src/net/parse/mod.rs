//! The protocol readers the network's two modes share, a leaf below them: the HTTP/1 request
//! framer (and the hop-by-hop headers a relayed request loses) and the first-bytes peek (TLS
//! SNI, the HTTP `Host`). They read bytes and answer; they decide nothing and dial nothing.

pub mod http1;
pub mod peek;
