import unittest

from shop.pricing import add_tax


class AddTaxTest(unittest.TestCase):
    def test_twenty_percent(self) -> None:
        self.assertEqual(add_tax(100, 20), 120.0)
