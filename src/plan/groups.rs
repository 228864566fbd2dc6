//! The user's supplementary groups inside the userns jail. An unprivileged user namespace can
//! map only the user's own uid and gid: every other group the user is in still counts for
//! access (the kernel checks the real ids), but shows as `nogroup`, has no name, and
//! `chgrp` to it fails, which breaks group-shared project directories (Spack, conda and
//! `cp -p` set group ownership). Where the site lets it, the launcher maps them one to one
//! through the setuid `newgidmap` (shadow's uidmap): the groups `/etc/subgid` grants the user
//! as ranges that cover them. This module decides which (pure); `jail::userns` runs it.

use serde::Serialize;
use std::path::PathBuf;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GroupsPlan {
    /// Supplementary groups mapped one to one, with their names (for the jail's /etc/group).
    pub mapped: Vec<(u32, String)>,
    /// Supplementary groups left out: they show as nogroup inside.
    pub unmapped: Vec<u32>,
    /// Why the unmapped ones are (None: every group is mapped, or the user has none).
    pub why: Option<String>,
    /// The setuid helper that writes the jail's gid map (None: the launcher writes its own gid).
    pub newgidmap: Option<PathBuf>,
}

impl GroupsPlan {
    /// For the banner and the dry run: None when the user has no supplementary group.
    pub fn summary(&self) -> Option<String> {
        let total = self.mapped.len() + self.unmapped.len();
        if total == 0 {
            return None;
        }
        let names: Vec<&str> = self.mapped.iter().map(|(_, n)| n.as_str()).collect();
        Some(match (self.mapped.len(), &self.why) {
            (_, None) => format!("groups {} (newgidmap)", names.join(",")),
            (0, Some(why)) => format!("groups: {total} show as nogroup ({why})"),
            (_, Some(why)) => {
                format!("groups {} (newgidmap); {} show as nogroup ({why})", names.join(","), self.unmapped.len())
            }
        })
    }
}

/// This host's user's supplementary groups as the userns jail maps them (`plan`, from the
/// facts): for the plan and for `doctor`.
pub fn of_host(facts: &crate::host::HostFacts) -> GroupsPlan {
    plan(&facts.groups, facts.gid, &facts.etc_group, &facts.etc_subgid, &facts.user, facts.uid, facts.newgidmap.clone())
}

/// The ranges `/etc/subgid` grants `user` (by name or uid): (first, count).
pub fn subgid_ranges(subgid: &str, user: &str, uid: u32) -> Vec<(u32, u32)> {
    let uid = uid.to_string();
    subgid
        .lines()
        .filter_map(|l| {
            let mut f = l.trim().split(':');
            let (who, start, count) = (f.next()?, f.next()?.parse().ok()?, f.next()?.parse().ok()?);
            (who == user || who == uid).then_some((start, count))
        })
        .collect()
}

/// Which supplementary groups (`groups`, the primary gid left out) are mapped: those a range
/// of `/etc/subgid` covers, when a usable `newgidmap` exists. Names from the host's
/// /etc/group (a group without one is named by its number).
pub fn plan(
    groups: &[u32],
    primary: u32,
    etc_group: &str,
    subgid: &str,
    user: &str,
    uid: u32,
    newgidmap: Option<PathBuf>,
) -> GroupsPlan {
    let mut extra: Vec<u32> = groups.iter().copied().filter(|g| *g != primary).collect();
    extra.sort_unstable();
    extra.dedup();
    if extra.is_empty() {
        return GroupsPlan::default();
    }
    let Some(helper) = newgidmap else {
        return GroupsPlan {
            unmapped: extra,
            why: Some("no setuid newgidmap here: the site's uidmap package maps them".into()),
            ..Default::default()
        };
    };
    let ranges = subgid_ranges(subgid, user, uid);
    let covered = |g: u32| ranges.iter().any(|(s, c)| g >= *s && u64::from(g) < u64::from(*s) + u64::from(*c));
    let (mapped, unmapped): (Vec<u32>, Vec<u32>) = extra.into_iter().partition(|g| covered(*g));
    let name = |g: u32| {
        etc_group
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split(':').collect();
                (f.len() >= 3 && f[2].parse::<u32>().ok() == Some(g)).then(|| f[0].to_string())
            })
            .unwrap_or_else(|| g.to_string())
    };
    let why = (!unmapped.is_empty()).then(|| "no /etc/subgid range of yours covers them".to_string());
    GroupsPlan { mapped: mapped.into_iter().map(|g| (g, name(g))).collect(), unmapped, why, newgidmap: Some(helper) }
        .only_if_any_mapped()
}

impl GroupsPlan {
    /// Without a group to map, the helper is not run at all.
    fn only_if_any_mapped(mut self) -> GroupsPlan {
        if self.mapped.is_empty() {
            self.newgidmap = None;
        }
        self
    }
}

/// The groups of `etc_group` that a range of `user` in `/etc/subgid` covers although the user
/// is not in them: `newgidmap` checks the ranges, not membership, so the user can take these
/// groups in a user namespace of their own (outside any jail). For `doctor` to warn of.
pub fn granted_beyond_membership(subgid: &str, user: &str, uid: u32, groups: &[u32], etc_group: &str) -> Vec<String> {
    let ranges = subgid_ranges(subgid, user, uid);
    etc_group
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            let gid: u32 = f.get(2)?.parse().ok()?;
            let covered = ranges.iter().any(|(s, c)| gid >= *s && u64::from(gid) < u64::from(*s) + u64::from(*c));
            (covered && !groups.contains(&gid)).then(|| f[0].to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GROUP: &str = "root:x:0:\nusers:x:100:\nbob:x:1001:\nproj:x:2345:bob\nlab:x:2400:bob\n";

    #[test]
    fn covered_groups_are_mapped_with_their_names_and_the_rest_said() {
        let helper = Some(PathBuf::from("/usr/bin/newgidmap"));
        let p = plan(&[1001, 2345, 2400], 1001, GROUP, "bob:100000:65536\nbob:2345:1\n", "bob", 1001, helper.clone());
        // (A range over several real gids is what doctor warns of: granted_beyond_membership.)
        assert_eq!(p.mapped, [(2345, "proj".to_string())]);
        assert_eq!(p.unmapped, [2400]);
        assert!(p.why.as_deref().is_some_and(|w| w.contains("/etc/subgid")));
        assert_eq!(
            p.summary().as_deref(),
            Some("groups proj (newgidmap); 1 show as nogroup (no /etc/subgid range of yours covers them)")
        );
        let all = plan(&[2345, 2400], 1001, GROUP, "1001:2300:200\n", "bob", 1001, helper.clone());
        assert_eq!((all.mapped.len(), all.why.clone(), all.newgidmap.is_some()), (2, None, true), "by uid, one range");
        let none = plan(&[2345], 1001, GROUP, "alice:2345:1\n", "bob", 1001, helper);
        assert_eq!((none.mapped.len(), none.newgidmap), (0, None), "another user's range covers nothing of bob's");
    }

    #[test]
    fn without_newgidmap_or_groups_nothing_is_mapped() {
        let p = plan(&[2345], 1001, GROUP, "bob:2345:1\n", "bob", 1001, None);
        assert!(
            p.mapped.is_empty() && p.unmapped == [2345] && p.why.as_deref().is_some_and(|w| w.contains("newgidmap"))
        );
        assert_eq!(plan(&[1001], 1001, GROUP, "", "bob", 1001, None), GroupsPlan::default(), "the primary only");
        assert_eq!(GroupsPlan::default().summary(), None);
    }

    #[test]
    fn a_range_over_groups_the_user_is_not_in_is_found() {
        let beyond = granted_beyond_membership("bob:2300:200\n", "bob", 1001, &[1001, 2345], GROUP);
        assert_eq!(beyond, ["lab"], "2400 is in bob's range but bob is not in lab");
        assert!(granted_beyond_membership("bob:2345:1\n", "bob", 1001, &[2345], GROUP).is_empty());
    }

    #[test]
    fn subgid_lines_that_do_not_parse_are_skipped() {
        let r = subgid_ranges("bob:x:1\nbob:5\n#bob:1:1\nbob:10:2\n", "bob", 1);
        assert_eq!(r, [(10, 2)]);
    }
}
