"""flowcast.house"""
