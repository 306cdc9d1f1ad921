"""flowcast.export"""
