//! The address classifier on every range, without connecting anywhere.

use super::*;

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap_or_else(|e| unreachable!("{text}: {e}"))
}

#[test]
fn ipv4_non_public_ranges_and_their_edges() {
    let refused = [
        "0.0.0.0",
        "0.255.255.255",
        "10.0.0.0",
        "10.255.255.255",
        "100.64.0.0",
        "100.127.255.255",
        "127.0.0.1",
        "127.255.255.254",
        "169.254.0.1",
        "169.254.169.254",
        "172.16.0.0",
        "172.31.255.255",
        "192.0.0.8",
        "192.0.0.170",
        "192.0.2.1",
        "192.88.99.1",
        "192.168.0.1",
        "192.168.255.255",
        "198.18.0.0",
        "198.19.255.255",
        "198.51.100.7",
        "203.0.113.9",
        "224.0.0.1",
        "239.255.255.255",
        "240.0.0.1",
        "255.255.255.255",
    ];
    for text in refused {
        assert!(non_public_reason(ip(text)).is_some(), "{text} must be refused");
    }
    let public = [
        "1.1.1.1",
        "8.8.8.8",
        "9.255.255.255",
        "11.0.0.0",
        "100.63.255.255",
        "100.128.0.0",
        "126.255.255.255",
        "128.0.0.0",
        "169.253.255.255",
        "169.255.0.0",
        "172.15.255.255",
        "172.32.0.0",
        "192.0.1.0",
        "192.0.3.0",
        "192.88.98.255",
        "192.167.255.255",
        "192.169.0.0",
        "198.17.255.255",
        "198.20.0.0",
        "198.51.99.255",
        "203.0.114.0",
        "223.255.255.255",
    ];
    for text in public {
        assert_eq!(non_public_reason(ip(text)), None, "{text} must be allowed");
    }
}

#[test]
fn reasons_name_the_range() {
    assert_eq!(non_public_reason(ip("169.254.169.254")), Some("link-local (cloud metadata)"));
    assert_eq!(non_public_reason(ip("100.64.0.1")), Some("shared address space (CGNAT)"));
    assert_eq!(non_public_reason(ip("127.0.0.1")), Some("loopback"));
    assert_eq!(non_public_reason(ip("::1")), Some("loopback"));
    assert_eq!(non_public_reason(ip("fd00::1")), Some("unique local (fc00::/7)"));
}

#[test]
fn ipv6_non_public_ranges() {
    let refused = [
        "::",
        "::1",
        "::2",
        "::127.0.0.1",
        "::8.8.8.8",
        "100::",
        "100::ffff:ffff:ffff:ffff",
        "64:ff9b:1::1",
        "2001::1",
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",
        "2001:2::1",
        "2001:10::1",
        "2001:20::1",
        "2001:1ff:ffff::",
        "2001:db8::1",
        "2001:db8:ffff:ffff::",
        "3fff::1",
        "3fff:fff::1",
        "5f00::1",
        "fc00::1",
        "fd12:3456::1",
        "fdff:ffff::1",
        "fe80::1",
        "febf:ffff::1",
        "fec0::1",
        "feff::1",
        "ff02::1",
        "ff0e::101",
        "1::1",
        "1fff:ffff::1",
        "4000::1",
        "e000::1",
    ];
    for text in refused {
        assert!(non_public_reason(ip(text)).is_some(), "{text} must be refused");
    }
    let public = [
        "2000::1",
        "2001:200::1",
        "2001:4860:4860::8888",
        "2606:4700:4700::1111",
        "3ffe::1",
        "3fff:1000::1",
        "2a00:1450::1",
    ];
    for text in public {
        assert_eq!(non_public_reason(ip(text)), None, "{text} must be allowed");
    }
}

#[test]
fn addresses_carrying_ipv4_are_judged_by_it() {
    for text in [
        "::ffff:127.0.0.1",
        "::ffff:10.1.2.3",
        "::ffff:169.254.169.254",
        "::ffff:100.64.1.1",
        "::ffff:224.0.0.1",
        "::ffff:0.0.0.0",
        "::ffff:255.255.255.255",
        "64:ff9b::127.0.0.1",
        "64:ff9b::a9fe:a9fe",
        "64:ff9b::192.168.1.1",
        "2002:7f00:1::1",
        "2002:a00:1::",
        "2002:c0a8:101::1",
        "2002:a9fe:a9fe::",
    ] {
        assert!(non_public_reason(ip(text)).is_some(), "{text} must be refused");
    }
    for text in ["::ffff:8.8.8.8", "::ffff:1.1.1.1", "64:ff9b::8.8.8.8", "2002:808:808::1"] {
        assert_eq!(non_public_reason(ip(text)), None, "{text} must be allowed");
    }
}

#[test]
fn allow_list_parsing_and_matching() {
    let list = AllowList::parse("localhost, 127.0.0.0/8 [::1]\n10.1.2.3,Hooks.Internal. fd00::/8").unwrap_or_default();
    assert!(!list.is_empty());
    assert!(list.allows_host("localhost") && list.allows_host("LOCALHOST") && list.allows_host("hooks.internal"));
    assert!(list.allows_host("localhost."));
    assert!(!list.allows_host("localhost.example.com") && !list.allows_host("internal"));
    for allowed in ["127.0.0.1", "127.9.9.9", "::1", "10.1.2.3", "fd00::5", "::ffff:127.0.0.1"] {
        assert!(list.allows_ip(ip(allowed)), "{allowed}");
    }
    for refused in ["10.1.2.4", "::2", "fe80::1", "192.168.1.1"] {
        assert!(!list.allows_ip(ip(refused)), "{refused}");
    }
    assert!(list.permits("localhost", ip("192.168.1.1")), "a listed host may reach any address");
    assert!(list.permits("example.com", ip("8.8.8.8")), "public");
    assert!(!list.permits("example.com", ip("192.168.1.1")));
    assert_eq!(AllowList::parse(""), Ok(AllowList::default()));
    assert!(AllowList::parse(" , ").is_ok_and(|l| l.is_empty()));
    for bad in ["300.1.1.1/8", "10.0.0.0/33", "a_b", "-bad.host", "http://x", "x/y"] {
        assert_eq!(AllowList::parse(bad), Err(AllowListError(bad.to_owned())), "{bad}");
    }
    let host_bits = AllowList::parse("10.9.8.7/8").unwrap_or_default();
    assert!(host_bits.allows_ip(ip("10.200.0.1")), "host bits in a CIDR are ignored");
    assert!(!AllowList::default().permits("localhost", ip("127.0.0.1")));
}
