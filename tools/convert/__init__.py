"""Converters from the SkyPilot catalog CSVs into cloudgpu's own offer files (one module
per provider); tools/convert_prices.py drives them."""
