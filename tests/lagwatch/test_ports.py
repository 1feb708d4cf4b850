"""The dev kit's port choice: below the kernel's ephemeral range, free, and the system's pick when there is no room."""

import socket

from lagwatch.devkit import ports


def test_a_port_is_drawn_below_the_ephemeral_range_and_is_free():
    low = ports._ephemeral_range_start()
    for _ in range(20):
        port = ports.free_port()
        assert low - ports.BELOW <= port < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free: binds


def test_with_no_room_below_the_range_the_system_picks(tmp_path, monkeypatch):
    range_file = tmp_path / "ip_local_port_range"
    range_file.write_text("2000\t60999\n")
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE", range_file)
    port = ports.free_port()
    assert 2000 <= port <= 60999


def test_a_process_is_not_handed_the_same_port_twice():
    """Servers started together choose their ports first: two equal draws would make one of them fail to bind (one
    of the ways a service of the read-only test once exited with "Address already in use")."""
    chosen = [ports.free_port() for _ in range(500)]
    assert len(set(chosen)) == len(chosen)
