"""Raw HTTP/1.1 over a loopback socket, for heads an HTTP client library would not send
(malformed framing, NUL bytes, a head split over several TCP segments). Shared by the
integration suite (request framing) and the deployment suite (nginx in front); both put this
directory on sys.path."""
import socket
import time


def send_raw(port, data, timeout=10, pause=0.0):
    """Sends `data` (bytes, or a list of pieces sent one by one with TCP_NODELAY and `pause`
    seconds between them, so that the server likely reads them separately) and reads until
    the server closes the connection. Returns every byte received."""
    pieces = [data] if isinstance(data, (bytes, bytearray)) else list(data)
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    got = b""
    try:
        for i, p in enumerate(pieces):
            if i and pause:
                time.sleep(pause)  # shapes the delivery only; nothing is timed
            s.sendall(p)
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            got += chunk
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server closed while we still sent: what it wrote is read above or lost
    finally:
        s.close()
    return got


def status_codes(got):
    """The status code of every HTTP/1.x status line anywhere in `got` (a garbled reply shows
    more of them than responses it contains)."""
    out = []
    i = got.find(b"HTTP/1.")
    while i >= 0:
        code = got[i + 9:i + 12]
        if got[i + 8:i + 9] == b" " and code.isdigit():
            out.append(int(code))
        i = got.find(b"HTTP/1.", i + 1)
    return out


def responses(got):
    """Splits `got` into Content-Length framed responses, as the daemon sends them: a list of
    (status, headers as a dict with lower-case names, body)."""
    out = []
    while got.startswith(b"HTTP/1.1 "):
        head, _, rest = got.partition(b"\r\n\r\n")
        headers = {}
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            headers[k.strip().lower().decode("latin-1")] = v.strip().decode("latin-1")
        n = int(headers.get("content-length", "0"))
        out.append((int(head[9:12]), headers, rest[:n]))
        got = rest[n:]
    return out


def exchange(port, data, timeout=10):
    """Sends data, reads until the server closes; the list of (status, body) received."""
    return [(st, body) for st, _, body in responses(send_raw(port, data, timeout))]
