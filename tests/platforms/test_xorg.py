"""The generated Xorg configuration (text only: there is no NVIDIA GPU here)."""

from unirender.platforms.xorg import PciGpu, parse_display_active, parse_lspci_vmm, render_config

LSPCI = """Slot:\t00:02.0
Class:\tVGA compatible controller
Vendor:\tIntel Corporation
Device:\tUHD Graphics 630

Slot:\t0a:00.0
Class:\t3D controller
Vendor:\tNVIDIA Corporation
Device:\tGA100 [A100 SXM4 40GB]
SVendor:\tNVIDIA Corporation

Slot:\t0000:1b:1f.3
Class:\tVGA compatible controller
Vendor:\tNVIDIA Corporation
Device:\tTU102 [GeForce RTX 2080 Ti]

Slot:\t3b:00.0
Class:\tAudio device
Vendor:\tNVIDIA Corporation
Device:\tTU102 High Definition Audio Controller
"""


def test_lspci_finds_only_nvidia_display_controllers():
    gpus = parse_lspci_vmm(LSPCI)
    assert [g.slot for g in gpus] == ["0a:00.0", "0000:1b:1f.3"]
    assert [g.bus_id for g in gpus] == ["PCI:10:0:0", "PCI:27:31:3"]  # hex -> decimal, domain dropped


def test_display_active_bus_ids():
    smi = "00000000:0A:00.0, Disabled\n00000000:1B:1F.3, Enabled\n"
    assert parse_display_active(smi) == {"1b:1f.3"}


def test_config_has_one_screen_per_gpu():
    gpus = [PciGpu("0a:00.0", "A100"), PciGpu("1b:1f.3", "2080 Ti", display_active=True)]
    text = render_config(gpus, 1920, 1080)
    assert text.count('Section "Device"') == 2 and text.count('Section "Screen"') == 2
    assert 'BusID          "PCI:10:0:0"' in text and 'BusID          "PCI:27:31:3"' in text
    assert text.count("DefaultDepth    24") == 2 and text.count("Virtual     1920 1080") == 2
    assert text.count('"UseDisplayDevice" "None"') == 1
    screen1 = text.split('Identifier     "Screen1"')[1].split("EndSection")[0]
    assert '"UseDisplayDevice" "None"' in screen1 and 'Device         "Device1"' in screen1
    layout = text.split('Section "ServerLayout"')[1]
    assert 'Screen 0 "Screen0" 0 0' in layout and 'Screen 1 "Screen1" 0 0' in layout
    assert text.count("EndSection") == 5
