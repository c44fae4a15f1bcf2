//! A route's `aggregate`: what it decodes to, and each mistake (a
//! cycle, an unknown reference or service) named where it is.

use super::{errors, ok};
use crate::*;
use std::time::Duration;

fn route(parts: &str) -> String {
    format!(
        "listen: 127.0.0.1:8080
services:
  - name: orders
    endpoints: [\"127.0.0.1:9001\"]
  - name: customers
    endpoints: [\"127.0.0.1:9002\"]
routes:
  - name: page
    match: {{ path: \"/page/orders/{{id:int}}\" }}
    aggregate:
{parts}"
    )
}

#[test]
fn parts_decode_in_order_with_their_defaults() {
    let c = ok(&route(
        "      - { name: order, service: orders, path: \"/orders/${id}\" }
      - { name: customer, service: customers, path: \"/c/${order.customer.ids.0}\", optional: true, timeout: 300ms }
",
    ));
    let Action::Aggregate(parts) = &c.routes[0].action else {
        panic!("{:?}", c.routes[0].action);
    };
    assert_eq!(
        parts,
        &[
            AggregatePart {
                name: "order".into(),
                service: "orders".into(),
                path: "/orders/${id}".into(),
                optional: false,
                timeout: None,
            },
            AggregatePart {
                name: "customer".into(),
                service: "customers".into(),
                path: "/c/${order.customer.ids.0}".into(),
                optional: true,
                timeout: Some(Duration::from_millis(300)),
            },
        ]
    );
    // A part may wait for a later one.
    ok(&route(
        "      - { name: a, service: orders, path: \"/a/${b.x}\" }
      - { name: b, service: orders, path: \"/b\" }
",
    ));
}

#[test]
fn a_cycle_is_refused_at_the_path_that_starts_it() {
    assert_eq!(
        errors(&route(
            "      - { name: a, service: orders, path: \"/a/${b.x}\" }
      - { name: b, service: orders, path: \"/b/${c.y}\" }
      - { name: c, service: orders, path: \"/c/${a.z}\" }
"
        )),
        ["11:43: routes[0].aggregate[0].path: parts wait for each other in a cycle: a -> b -> c -> a"]
    );
    assert_eq!(
        errors(&route(
            "      - { name: a, service: orders, path: \"/a/${a.x}\" }
"
        )),
        ["11:43: routes[0].aggregate[0].path: ${a.x}: a part cannot wait for its own answer"]
    );
}

#[test]
fn unknown_references_services_and_names_are_named() {
    assert_eq!(
        errors(&route(
            "      - { name: a, service: orders, path: \"/a/${nope}\" }
"
        )),
        ["11:43: routes[0].aggregate[0].path: ${nope} is not a parameter of match.path \"/page/orders/{id:int}\"; another part's value is ${PART.FIELD}"]
    );
    assert_eq!(
        errors(&route(
            "      - { name: a, service: orders, path: \"/a/${ghost.id}\" }
"
        )),
        ["11:43: routes[0].aggregate[0].path: ${ghost.id}: no part is named \"ghost\""]
    );
    assert_eq!(
        errors(&route(
            "      - { name: a, service: nowhere, path: \"/a\" }
"
        )),
        ["11:29: routes[0].aggregate[0].service: unknown service \"nowhere\""]
    );
    let e = errors(&route(
        "      - { name: a, service: orders, path: /a }
      - { name: a, service: orders, path: /b }
      - { name: 9x, service: orders, path: /c }
",
    ));
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(
        e[0].contains("routes[0].aggregate[1].name: part \"a\" is named twice"),
        "{e:?}"
    );
    assert!(
        e[1].contains("routes[0].aggregate[2].name: bad part name \"9x\""),
        "{e:?}"
    );
    let e = errors(&route(
        "      - { name: a, service: orders, path: a }
",
    ));
    assert_eq!(e, ["11:43: routes[0].aggregate[0].path: must start with /"]);
}

#[test]
fn aggregate_excludes_service_and_the_proxy_keys() {
    let text = route(
        "      - { name: a, service: orders, path: /a }
    service: orders
",
    );
    let e = errors(&text);
    assert!(
        e.len() == 1
            && e[0]
                .contains("routes[0].aggregate: give one of service, split, respond or aggregate"),
        "{e:?}"
    );
    let text = route(
        "      - { name: a, service: orders, path: /a }
    mirror: { service: orders }
",
    );
    let e = errors(&text);
    assert!(
        e.len() == 1 && e[0].contains("routes[0].mirror: only applies to routes with a service"),
        "{e:?}"
    );
}
