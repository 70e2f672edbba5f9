"""Headless Chromium driven through Selenium, and a pool of browsers reused across episodes.

Every browser call runs on the browser's own thread with a deadline. A browser that dies (its process killed,
a crashed page, a lost chromedriver) or hangs past the deadline is killed with its whole process tree and
raises ``BrowserError``; the pool starts a fresh one for the next episode. Everything the pool started is
killed at interpreter exit, after Ctrl-C and on SIGTERM, and by a watchdog process when this process dies
without cleaning up (SIGKILL, a crash; see ``agentbridge_gui.watchdog``).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import shutil
import signal
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psutil

from agentbridge_gui.watchdog import ensure_watchdog

T = TypeVar("T")

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--mute-audio", "--disable-extensions", "--no-default-browser-check")
INSTALL_HINT = "install the Debian packages: apt-get install -y chromium chromium-driver"


class BrowserError(RuntimeError):
    """The browser died, hung or could not start; the episode using it must end with an error."""


class BrowserUnavailable(BrowserError):
    """No Chromium or ChromeDriver on this machine (one line saying how to install them)."""


def find_binaries() -> tuple[str, str]:
    """Paths of chromium and chromedriver (``MINIWOB_CHROME_BINARY``/``MINIWOB_CHROMEDRIVER`` override)."""
    chrome = os.environ.get("MINIWOB_CHROME_BINARY") or next(
        (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    driver = os.environ.get("MINIWOB_CHROMEDRIVER") or shutil.which("chromedriver")
    missing = [name for name, path in (("chromium", chrome), ("chromedriver", driver)) if not path]
    if missing:
        raise BrowserUnavailable(f"{' and '.join(missing)} not found on PATH; {INSTALL_HINT}")
    return str(chrome), str(driver)


def _is_fatal(exc: BaseException) -> bool:
    """Whether ``exc`` means the browser is gone (not a script error on a live page)."""
    from selenium.common.exceptions import JavascriptException, WebDriverException

    if isinstance(exc, JavascriptException):
        return False
    return isinstance(exc, WebDriverException | ConnectionError | OSError) or type(exc).__module__.startswith(
        ("urllib3", "http.client"))


class Browser:
    """One headless Chromium + ChromeDriver. Use ``await browser.call(fn, *args)`` for every driver call."""

    def __init__(self, index: int, *, op_timeout_s: float = 20.0) -> None:
        self.index = index
        self.op_timeout_s = op_timeout_s
        self.driver: Any = None
        self.url: str | None = None
        self.episodes = 0
        self.dead = False
        self.error: str | None = None
        self._pids: set[int] = set()
        self.user_data_dir: Path | None = None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"agentbridge-gui-browser-{index}")

    # ---- lifecycle (blocking; the pool runs these on a thread) ----
    def start(self) -> None:
        """Launch chromium through chromedriver (blocking)."""
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        chrome, chromedriver = find_binaries()
        watchdog = ensure_watchdog()  # marks chromedriver and chromium so they die with this process
        self.user_data_dir = watchdog.user_data_dir(f"browser-{self.index}")
        options = webdriver.ChromeOptions()
        options.binary_location = chrome
        for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={self.user_data_dir}"):
            options.add_argument(flag)
        service = Service(executable_path=chromedriver, log_output=os.devnull, env=watchdog.env())
        try:
            self.driver = webdriver.Chrome(service=service, options=options)
        except Exception as e:  # noqa: BLE001 - any launch failure is one line
            self.kill()
            with contextlib.suppress(Exception):
                service.stop()
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise BrowserError(f"chromium failed to start: {first}") from None
        with contextlib.suppress(Exception):  # a hung HTTP call to chromedriver must not block forever
            self.driver.command_executor.client_config.timeout = self.op_timeout_s + 5
        self.driver.set_script_timeout(self.op_timeout_s)
        self.driver.set_page_load_timeout(self.op_timeout_s)
        self._remember_pids()

    def _remember_pids(self) -> None:
        proc = getattr(getattr(self.driver, "service", None), "process", None)
        if proc is None:
            return
        self._pids.add(proc.pid)
        with contextlib.suppress(psutil.Error):
            self._pids.update(p.pid for p in psutil.Process(proc.pid).children(recursive=True))

    def pids(self) -> list[int]:
        """Live pids of chromedriver and every chromium process it started."""
        live: set[int] = set()
        for pid in list(self._pids):
            with contextlib.suppress(psutil.Error):
                p = psutil.Process(pid)
                if p.status() != psutil.STATUS_ZOMBIE:
                    live.add(pid)
                live.update(c.pid for c in p.children(recursive=True))
        self._pids |= live
        return sorted(live)

    def chromium_pid(self) -> int | None:
        """The main chromium (browser) process, child of chromedriver."""
        proc: Any = getattr(getattr(self.driver, "service", None), "process", None)  # None: AttributeError below
        with contextlib.suppress(psutil.Error, AttributeError):
            kids = psutil.Process(proc.pid).children()
            return next((k.pid for k in kids if "chrom" in k.name()), kids[0].pid if kids else None)
        return None

    def rss_mb(self) -> float:
        """Resident memory of the whole browser process tree (shared pages counted once per process)."""
        total = 0
        for pid in self.pids():
            with contextlib.suppress(psutil.Error):
                total += psutil.Process(pid).memory_info().rss
        return total / 2**20

    def kill(self, reason: str | None = None) -> None:
        """Kill chromedriver and every chromium process (SIGKILL); idempotent and safe from any thread."""
        self.dead = True
        self.error = self.error or reason
        procs = []
        for pid in self.pids():
            with contextlib.suppress(psutil.Error):
                procs.append(psutil.Process(pid))
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(procs, timeout=3)
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self.user_data_dir is not None:
            shutil.rmtree(self.user_data_dir, ignore_errors=True)

    def close(self) -> None:
        """Quit politely when alive (bounded), then make sure nothing is left."""
        if not self.dead and self.driver is not None:
            done = threading.Event()

            def quit_driver() -> None:
                with contextlib.suppress(Exception):
                    self.driver.quit()
                done.set()

            threading.Thread(target=quit_driver, daemon=True).start()
            done.wait(5.0)
        self.kill()

    # ---- calls ----
    def call_blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(driver, *args)`` on the browser thread and wait (for non-async callers, e.g. benchmarks)."""
        if self.dead:
            raise BrowserError(f"browser {self.index} is dead: {self.error}")
        fut = self._executor.submit(fn, self.driver, *args)
        try:
            return fut.result(timeout=self.op_timeout_s)
        except TimeoutError:
            self.kill(f"no answer in {self.op_timeout_s:g}s")
            raise BrowserError(f"browser {self.index} hung (no answer in {self.op_timeout_s:g}s); "
                               "it was killed") from None
        except Exception as e:
            if _is_fatal(e):
                self.kill(f"{type(e).__name__}")
                raise BrowserError(f"browser {self.index} died: {type(e).__name__}: "
                                   f"{(str(e).splitlines() or [''])[0][:200]}") from None
            raise

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(driver, *args)`` on the browser thread; dead or hung browsers raise ``BrowserError``."""
        if self.dead:
            raise BrowserError(f"browser {self.index} is dead: {self.error}")
        fut = asyncio.wrap_future(self._executor.submit(fn, self.driver, *args))
        try:
            return await asyncio.wait_for(fut, self.op_timeout_s)
        except TimeoutError:
            await asyncio.to_thread(self.kill, f"no answer in {self.op_timeout_s:g}s")
            raise BrowserError(f"browser {self.index} hung (no answer in {self.op_timeout_s:g}s); "
                               "it was killed") from None
        except Exception as e:
            if _is_fatal(e):
                await asyncio.to_thread(self.kill, type(e).__name__)
                raise BrowserError(f"browser {self.index} died: {type(e).__name__}: "
                                   f"{(str(e).splitlines() or [''])[0][:200]}") from None
            raise


@dataclass
class PoolStats:
    started: int = 0
    replaced: int = 0
    recycled: int = 0
    episodes: int = 0
    waits_s: list[float] = field(default_factory=list)


class BrowserPool:
    """``size`` browsers reused across episodes. ``acquire`` waits for a free one (starting it if needed).

    Memory stays bounded: at most ``size`` browsers exist, each is recycled after ``max_episodes`` episodes or
    when its process tree exceeds ``max_rss_mb`` (checked every ``rss_check_every`` episodes). A browser
    released as broken (died, hung) is killed and replaced on the next acquire.
    """

    def __init__(self, size: int = 2, *, op_timeout_s: float = 20.0, start_timeout_s: float = 60.0,
                 max_episodes: int = 500, max_rss_mb: float = 2048.0, rss_check_every: int = 50) -> None:
        if size < 1:
            raise ValueError(f"browsers: must be at least 1, got {size}")
        self.size = size
        self.op_timeout_s = op_timeout_s
        self.start_timeout_s = start_timeout_s
        self.max_episodes = max_episodes
        self.max_rss_mb = max_rss_mb
        self.rss_check_every = rss_check_every
        self.stats = PoolStats()
        self._lock = threading.Lock()
        self._idle: list[Browser] = []
        self._busy: set[Browser] = set()
        self._starting = 0
        self._next_index = 0
        self._closed = False
        _LIVE_POOLS.add(self)
        _install_exit_handlers()

    @property
    def browsers(self) -> list[Browser]:
        with self._lock:
            return [*self._idle, *self._busy]

    def _try_take(self) -> tuple[Browser | None, bool]:
        """An idle browser, or (None, True) when a new one may be started, or (None, False) to wait."""
        with self._lock:
            if self._closed:
                raise BrowserError("the browser pool is closed")
            while self._idle:
                b = self._idle.pop()
                if not b.dead:
                    self._busy.add(b)
                    return b, False
            if len(self._busy) + self._starting < self.size:
                self._starting += 1
                return None, True
            return None, False

    def _new_browser(self) -> Browser:
        with self._lock:
            self._next_index += 1
            index = self._next_index
        browser = Browser(index, op_timeout_s=self.op_timeout_s)
        try:
            browser.start()
        finally:
            with self._lock:
                self._starting -= 1
                if not browser.dead and browser.driver is not None:
                    self._busy.add(browser)
                    self.stats.started += 1
        return browser

    def acquire_blocking(self, timeout_s: float | None = None) -> Browser:
        """``acquire`` for non-async callers."""
        t0 = time.perf_counter()
        while True:
            browser, start = self._try_take()
            if browser is not None:
                return browser
            if start:
                return self._new_browser()
            if timeout_s is not None and time.perf_counter() - t0 > timeout_s:
                raise BrowserError(f"no free browser in {timeout_s:g}s (pool of {self.size})")
            time.sleep(0.005)

    async def acquire(self, timeout_s: float | None = 600.0) -> Browser:
        """A browser for one episode: an idle one, a new one while under ``size``, else wait for a release."""
        t0 = time.perf_counter()
        while True:
            browser, start = self._try_take()
            if browser is not None:
                self.stats.waits_s.append(time.perf_counter() - t0)
                return browser
            if start:
                task = asyncio.get_running_loop().run_in_executor(None, self._new_browser)
                try:
                    browser = await asyncio.wait_for(asyncio.shield(task), self.start_timeout_s)
                except TimeoutError:
                    task.add_done_callback(lambda f: None if f.exception() else self.release(f.result(), broken=True))
                    raise BrowserError(f"chromium did not start in {self.start_timeout_s:g}s") from None
                return browser
            if timeout_s is not None and time.perf_counter() - t0 > timeout_s:
                raise BrowserError(f"no free browser in {timeout_s:g}s (pool of {self.size})")
            await asyncio.sleep(0.005)

    def release(self, browser: Browser, *, broken: bool = False) -> None:
        """Give a browser back; a broken or dead one is killed (and replaced on demand), an old one recycled."""
        browser.episodes += 1
        self.stats.episodes += 1
        recycle = broken or browser.dead or self._closed
        if not recycle and browser.episodes >= self.max_episodes:
            recycle, self.stats.recycled = True, self.stats.recycled + 1
        elif not recycle and browser.episodes % self.rss_check_every == 0 and browser.rss_mb() > self.max_rss_mb:
            recycle, self.stats.recycled = True, self.stats.recycled + 1
        if broken or browser.dead:
            self.stats.replaced += 1
        if recycle:
            threading.Thread(target=browser.close if not (broken or browser.dead) else browser.kill,
                             daemon=True).start()
        with self._lock:
            self._busy.discard(browser)
            if not recycle:
                self._idle.append(browser)

    def close(self) -> None:
        """Close every browser (idempotent)."""
        with self._lock:
            self._closed = True
            browsers = [*self._idle, *self._busy]
            self._idle.clear()
            self._busy.clear()
        threads = [threading.Thread(target=b.close, daemon=True) for b in browsers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10.0)

    def __enter__(self) -> BrowserPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_LIVE_POOLS: weakref.WeakSet[BrowserPool] = weakref.WeakSet()
_SHARED: dict[tuple[Any, ...], BrowserPool] = {}
_HANDLERS_INSTALLED = False


def shared_pool(size: int = 2, **options: Any) -> BrowserPool:
    """The process-wide pool for these options (environments built from a spec share it)."""
    key = (size, *sorted(options.items()))
    pool = _SHARED.get(key)
    if pool is None or pool._closed:
        pool = _SHARED[key] = BrowserPool(size, **options)
    return pool


def close_all_pools() -> None:
    """Close every pool in this process (registered with ``atexit``)."""
    for pool in list(_LIVE_POOLS):
        with contextlib.suppress(Exception):
            pool.close()


def _on_sigterm(signum: int, frame: Any) -> None:
    close_all_pools()
    raise SystemExit(128 + signum)


def _install_exit_handlers() -> None:
    """atexit always; SIGTERM only when nobody else handles it (Ctrl-C raises KeyboardInterrupt → atexit)."""
    global _HANDLERS_INSTALLED
    if _HANDLERS_INSTALLED:
        return
    _HANDLERS_INSTALLED = True
    atexit.register(close_all_pools)
    if threading.current_thread() is threading.main_thread():
        with contextlib.suppress(ValueError, OSError):
            if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
                signal.signal(signal.SIGTERM, _on_sigterm)
